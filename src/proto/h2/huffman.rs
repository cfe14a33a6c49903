//! HPACK's Huffman code (RFC 7541 Appendix B), decoding only.
//!
//! The code is canonical: ordered by (length, symbol), each code is the previous one
//! plus one, shifted left when the length grows. So the 257 code lengths are the whole
//! table, and decoding needs, per length, the first code and how many codes have that
//! length (built at compile time). A string decodes bit by bit with no table lookup
//! beyond those, and without allocating: the caller's buffer receives the bytes.
//!
//! `loona-hpack` decoded the same strings by building a two-level `HashMap` of the
//! table for every string: about 60% of the HTTP/2 client's CPU samples at 10,000
//! responses/s (docs/figures.md, "HTTP/2 beside h2load").

/// Code length of each symbol 0..=255, then EOS (256): Appendix B's "len in bits".
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The longest code (EOS and a few control bytes).
const LEN_MAX: usize = 30;
/// The end-of-string symbol: padding may be its leading bits, a decoded EOS is an error.
const EOS: u16 = 256;

/// Per-length decoding tables of a canonical code.
struct Canonical {
    /// `first[l]`: the first code of length `l`.
    first: [u32; LEN_MAX + 1],
    /// `count[l]`: how many codes have length `l`.
    count: [u32; LEN_MAX + 1],
    /// `base[l]`: where length `l`'s symbols start in `symbols`.
    base: [u16; LEN_MAX + 1],
    /// Every symbol, ordered by (length, symbol).
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut t = Canonical {
        first: [0; LEN_MAX + 1],
        count: [0; LEN_MAX + 1],
        base: [0; LEN_MAX + 1],
        symbols: [0; 257],
    };
    let mut s = 0;
    while s < 257 {
        t.count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let (mut code, mut at, mut len) = (0u32, 0u16, 1);
    while len <= LEN_MAX {
        code <<= 1;
        t.first[len] = code;
        t.base[len] = at;
        code += t.count[len];
        at += t.count[len] as u16;
        len += 1;
    }
    let mut fill = [0u16; LEN_MAX + 1];
    let mut s = 0;
    while s < 257 {
        let l = LENGTHS[s] as usize;
        t.symbols[(t.base[l] + fill[l]) as usize] = s as u16;
        fill[l] += 1;
        s += 1;
    }
    t
}

static CODE: Canonical = canonical();

/// Why a Huffman string does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol inside the string (§5.2: a decoding error).
    Eos,
    /// Padding longer than 7 bits, or not the leading bits of EOS (all ones).
    Padding,
}

/// Appends the decoding of `input` to `out`.
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let (mut code, mut len) = (0u32, 0usize);
    for &byte in input {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            // Codes of one length are consecutive from `first`: a prefix of a longer
            // code lies at or past `first + count` at this length.
            let at = code.wrapping_sub(CODE.first[len]);
            if at < CODE.count[len] {
                let symbol = CODE.symbols[(CODE.base[len] as u32 + at) as usize];
                if symbol == EOS {
                    return Err(HuffmanError::Eos);
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            } else if len == LEN_MAX {
                // Every 30-bit string is a code or passed one: unreachable for a
                // complete code, kept so a wrong table cannot index out of bounds.
                return Err(HuffmanError::Eos);
            }
        }
    }
    if len > 7 || code != (1 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical code of `symbol`, as (code, length).
    fn code_of(symbol: usize) -> (u32, usize) {
        let l = LENGTHS[symbol] as usize;
        let at = (CODE.base[l] as usize..)
            .zip(&CODE.symbols[CODE.base[l] as usize..])
            .find(|&(_, &s)| s as usize == symbol)
            .unwrap()
            .0
            - CODE.base[l] as usize;
        (CODE.first[l] + at as u32, l)
    }

    /// Encodes with the canonical code, padding with EOS's leading ones.
    fn encode(input: &[u8]) -> Vec<u8> {
        let (mut acc, mut bits, mut out) = (0u64, 0, Vec::new());
        for &b in input {
            let (c, l) = code_of(b as usize);
            acc = (acc << l) | u64::from(c);
            bits += l;
            while bits >= 8 {
                out.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        if bits > 0 {
            out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
        }
        out
    }

    #[test]
    fn codes_are_appendix_bs() {
        // Spot checks against the RFC's table at both ends and in the middle.
        assert_eq!(code_of(0), (0x1ff8, 13));
        assert_eq!(code_of(b'0' as usize), (0x0, 5));
        assert_eq!(code_of(b' ' as usize), (0x14, 6));
        assert_eq!(code_of(b'a' as usize), (0x3, 5));
        assert_eq!(code_of(b'~' as usize), (0x1ffd, 13));
        assert_eq!(code_of(255), (0x3ffffee, 26));
        assert_eq!(code_of(256), (0x3fffffff, 30));
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for chunk in [
            &all[..],
            b"",
            b"a",
            b"nginx",
            b"Mon, 21 Oct 2013 20:13:21 GMT",
        ] {
            let mut out = Vec::new();
            decode(&encode(chunk), &mut out).unwrap();
            assert_eq!(out, chunk);
        }
        // RFC 7541 C.4.1: "www.example.com".
        let mut out = Vec::new();
        let rfc = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        decode(&rfc, &mut out).unwrap();
        assert_eq!(out, b"www.example.com");
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = Vec::new();
        // 'a' (00011) then 3 bits of zeros: padding must be ones.
        assert_eq!(decode(&[0x18], &mut out), Err(HuffmanError::Padding));
        // A whole byte of ones is padding longer than 7 bits.
        let mut padded = encode(b"aaaaaaaa");
        assert_eq!(padded.len(), 5, "eight 5-bit codes end on a byte");
        padded.push(0xff);
        assert_eq!(decode(&padded, &mut out), Err(HuffmanError::Padding));
        // EOS itself, then padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut out),
            Err(HuffmanError::Eos)
        );
    }
}
