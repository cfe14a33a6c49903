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

/// Bits looked up at once: every code of at most this length (all the letters, digits
/// and common punctuation) decodes in one table lookup.
const FAST_BITS: usize = 10;

/// For each `FAST_BITS`-bit prefix, the symbol whose code begins it and the code's
/// length as `length << 8 | symbol`, or 0 where the code is longer (or the prefix is
/// the start of EOS).
const fn fast_table() -> [u16; 1 << FAST_BITS] {
    let code = canonical();
    let mut t = [0u16; 1 << FAST_BITS];
    let mut p = 0;
    while p < 1 << FAST_BITS {
        let mut len = 1;
        while len <= FAST_BITS {
            let at = ((p >> (FAST_BITS - len)) as u32).wrapping_sub(code.first[len]);
            if at < code.count[len] {
                let symbol = code.symbols[(code.base[len] as u32 + at) as usize];
                t[p] = (len as u16) << 8 | symbol;
                break;
            }
            len += 1;
        }
        p += 1;
    }
    t
}

static FAST: [u16; 1 << FAST_BITS] = fast_table();

/// Appends the decoding of `input` to `out`.
///
/// The input's bits are kept left-justified in a 64-bit word, refilled a byte at a
/// time; a code of up to [`FAST_BITS`] bits is one lookup, a longer one is found by
/// length from the canonical tables (codes of one length are consecutive from `first`).
/// A lookup that reaches past the input's last bit is not a symbol: what is left is
/// padding, valid when at most 7 bits, all ones (§5.2).
pub fn decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let (mut acc, mut bits, mut next) = (0u64, 0usize, 0usize);
    loop {
        while bits <= 56 && next < input.len() {
            acc |= u64::from(input[next]) << (56 - bits);
            bits += 8;
            next += 1;
        }
        if bits == 0 {
            return Ok(());
        }
        let hit = FAST[(acc >> (64 - FAST_BITS)) as usize];
        let (len, symbol) = if hit != 0 {
            ((hit >> 8) as usize, hit & 0xff)
        } else {
            long_code(acc)?
        };
        if len > bits {
            break;
        }
        if symbol == EOS {
            return Err(HuffmanError::Eos);
        }
        out.push(symbol as u8);
        acc <<= len;
        bits -= len;
    }
    if bits > 7 || acc >> (64 - bits) != (1 << bits) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// The (length, symbol) of the code longer than [`FAST_BITS`] at the top of `acc`.
#[inline]
fn long_code(acc: u64) -> Result<(usize, u16), HuffmanError> {
    for len in FAST_BITS + 1..=LEN_MAX {
        let at = ((acc >> (64 - len)) as u32).wrapping_sub(CODE.first[len]);
        if at < CODE.count[len] {
            return Ok((len, CODE.symbols[(CODE.base[len] as u32 + at) as usize]));
        }
    }
    // Every 30-bit string is a code or passed one: unreachable for a complete code,
    // kept so a wrong table cannot index out of bounds.
    Err(HuffmanError::Eos)
}

/// The canonical code of `symbol`, as (code, length).
#[cfg(test)]
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

/// Encodes with the canonical code, padding with EOS's leading ones (for tests).
#[cfg(test)]
pub(super) fn encode(input: &[u8]) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bit-by-bit decoder the table-driven one replaced: the reference it must equal.
    fn decode_bitwise(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
        let (mut code, mut len) = (0u32, 0usize);
        for &byte in input {
            for bit in (0..8).rev() {
                code = (code << 1) | u32::from((byte >> bit) & 1);
                len += 1;
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
                    return Err(HuffmanError::Eos);
                }
            }
        }
        if len > 7 || code != (1 << len) - 1 {
            return Err(HuffmanError::Padding);
        }
        Ok(())
    }

    #[test]
    fn the_table_decoder_equals_the_bitwise_one_on_any_input() {
        // Random byte strings (mostly invalid) and encodings of random text (valid),
        // every length 0..40: same bytes out, same error.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let n = (rnd() % 40) as usize;
            let raw: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
            let input = if round % 2 == 0 { raw } else { encode(&raw) };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let (ra, rb) = (decode(&input, &mut a), decode_bitwise(&input, &mut b));
            assert_eq!(ra, rb, "{input:02x?}");
            if ra.is_ok() {
                assert_eq!(a, b, "{input:02x?}");
            }
        }
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
