//! HPACK decoding (RFC 7541 §3-§6) with a bounded dynamic table and no allocation per
//! header block: the table's bytes live in one buffer sized when the connection opens
//! (twice the largest table size the connection allows, so an insertion after a
//! compaction always fits), Huffman strings decode into two scratch buffers that keep
//! their capacity, and each field reaches the caller as two borrowed slices.
//!
//! Entries are appended in insertion order and evicted oldest first, so the live bytes
//! are one contiguous run `[head, tail)`; when an insertion would pass the buffer's
//! end, the run moves to the front (a copy of at most the table's size).
use super::hpack::STATIC;
use super::huffman;
use std::collections::VecDeque;

/// Each entry's overhead in the table's size (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Why a header block does not decode (every one is a COMPRESSION_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ends inside an integer or a string.
    Truncated,
    /// An integer past 2^28 (no length or index of a sane block is that big).
    IntegerTooBig,
    /// Index 0, or past the static and dynamic tables.
    BadIndex,
    /// A Huffman string with the EOS symbol or wrong padding.
    Huffman,
    /// A dynamic table size update above the allowed size, or after a field.
    BadSizeUpdate,
}

/// One dynamic table entry: its name then value at `at` in the table's buffer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: usize,
    name: usize,
    value: usize,
}

impl Entry {
    fn size(&self) -> usize {
        self.name + self.value + ENTRY_OVERHEAD
    }
}

/// The dynamic table (§2.3.2).
#[derive(Debug)]
struct Table {
    bytes: Box<[u8]>,
    /// Newest first: index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    head: usize,
    tail: usize,
    /// The sum of the entries' sizes.
    size: usize,
    /// The table's maximum size, set by the encoder's size updates.
    max: usize,
}

impl Table {
    fn new(capacity: usize) -> Table {
        Table {
            bytes: vec![0; 2 * capacity].into_boxed_slice(),
            entries: VecDeque::with_capacity(capacity / ENTRY_OVERHEAD + 1),
            head: 0,
            tail: 0,
            size: 0,
            max: capacity,
        }
    }

    /// Entry `i` (0 = newest) as (name, value).
    fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let e = self.entries.get(i)?;
        let name = &self.bytes[e.at..e.at + e.name];
        Some((name, &self.bytes[e.at + e.name..e.at + e.name + e.value]))
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let e = self
                .entries
                .pop_back()
                .expect("a table of size > 0 has entries");
            self.size -= e.size();
            self.head = self.entries.back().map_or(self.tail, |e| e.at);
        }
        if self.entries.is_empty() {
            (self.head, self.tail) = (0, 0);
        }
    }

    fn resize(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    /// Adds an entry (§4.4): evicts until it fits; one larger than the table empties it.
    /// `name` must not borrow the table (the caller copies a table name first).
    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let e = Entry {
            at: 0,
            name: name.len(),
            value: value.len(),
        };
        if e.size() > self.max {
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max - e.size());
        let len = name.len() + value.len();
        if self.tail + len > self.bytes.len() {
            // The live run is at most `max - len` bytes and the buffer twice the
            // largest `max`, so after the move the entry fits.
            self.bytes.copy_within(self.head..self.tail, 0);
            for e in &mut self.entries {
                e.at -= self.head;
            }
            (self.head, self.tail) = (0, self.tail - self.head);
        }
        let at = self.tail;
        self.bytes[at..at + name.len()].copy_from_slice(name);
        self.bytes[at + name.len()..at + len].copy_from_slice(value);
        self.tail += len;
        if self.entries.is_empty() {
            self.head = at;
        }
        self.entries.push_front(Entry { at, ..e });
        self.size += e.size();
    }
}

/// Where a decoded string is: in the block, a scratch buffer, the static table, or
/// (a name only) the dynamic table.
#[derive(Clone, Copy)]
enum Str {
    Block(usize, usize),
    Scratch,
    Static(&'static [u8]),
    Table(usize),
}

/// Huffman strings at most this long (encoded) are kept in the decoder's cache.
const CACHE_RAW: usize = 32;
/// The longest decoding of a cached string: the shortest code is 5 bits.
const CACHE_OUT: usize = CACHE_RAW * 8 / 5 + 1;
/// Slots of the cache: a value whose name is in the static table takes the name's
/// slot (so a response's usual headers, each with one value, do not evict each other),
/// any other string one chosen by its first bytes.
const CACHE_SLOTS: usize = 8;

/// One recently decoded Huffman string: its encoded bytes and their decoding.
#[derive(Debug, Clone, Copy)]
struct Cached {
    raw_len: u8,
    raw: [u8; CACHE_RAW],
    out_len: u8,
    out: [u8; CACHE_OUT],
}

/// Recently decoded short Huffman strings. A server sends the same values again and
/// again (`server`, `content-type`, `content-length`, a `date` for a whole second),
/// each time Huffman-coded and, from nginx, with incremental indexing, so every one
/// must be decoded to keep the dynamic table's sizes; a cache hit is a compare and a
/// copy instead of a decoding (about 5% of the HTTP/2 client's CPU against nginx).
#[derive(Debug)]
struct HuffmanCache {
    slots: Box<[Cached; CACHE_SLOTS]>,
}

impl HuffmanCache {
    fn new() -> HuffmanCache {
        let empty = Cached {
            raw_len: 0,
            raw: [0; CACHE_RAW],
            out_len: 0,
            out: [0; CACHE_OUT],
        };
        HuffmanCache {
            slots: Box::new([empty; CACHE_SLOTS]),
        }
    }

    /// Replaces `out` with the decoding of `raw`, from the cache when `raw` is the
    /// string last decoded in its slot: `name`'s static index, if it has one.
    fn decode(
        &mut self,
        raw: &[u8],
        name: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        out.clear();
        if raw.len() > CACHE_RAW {
            return huffman::decode(raw, out).map_err(|_| DecodeError::Huffman);
        }
        let key = name.unwrap_or_else(|| {
            let mut head = [0u8; 8];
            let n = raw.len().min(8);
            head[..n].copy_from_slice(&raw[..n]);
            let h =
                (u64::from_le_bytes(head) ^ raw.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            (h >> 32) as usize
        });
        let slot = &mut self.slots[key % CACHE_SLOTS];
        if slot.raw[..slot.raw_len as usize] == *raw {
            out.extend_from_slice(&slot.out[..slot.out_len as usize]);
            return Ok(());
        }
        huffman::decode(raw, out).map_err(|_| DecodeError::Huffman)?;
        slot.raw_len = raw.len() as u8;
        slot.raw[..raw.len()].copy_from_slice(raw);
        slot.out_len = out.len() as u8;
        slot.out[..out.len()].copy_from_slice(out);
        Ok(())
    }
}

/// A connection's HPACK decoder.
#[derive(Debug)]
pub struct Decoder {
    table: Table,
    /// The largest size update the encoder may send (our SETTINGS_HEADER_TABLE_SIZE).
    allowed: usize,
    name: Vec<u8>,
    value: Vec<u8>,
    cache: HuffmanCache,
}

/// Scratch capacity for a Huffman string before it first grows.
const SCRATCH_BYTES: usize = 256;

impl Decoder {
    /// A decoder whose table starts at `allowed` bytes (the default is 4,096).
    pub fn new(allowed: usize) -> Decoder {
        Decoder {
            table: Table::new(allowed),
            allowed,
            name: Vec::with_capacity(SCRATCH_BYTES),
            value: Vec::with_capacity(SCRATCH_BYTES),
            cache: HuffmanCache::new(),
        }
    }

    /// The largest table size the encoder may ask for from now on.
    pub fn set_max_allowed_table_size(&mut self, allowed: usize) {
        if 2 * allowed > self.table.bytes.len() {
            // Only at setup (SETTINGS), never per block.
            let mut bytes = vec![0; 2 * allowed].into_boxed_slice();
            bytes[..self.table.bytes.len()].copy_from_slice(&self.table.bytes);
            self.table.bytes = bytes;
        }
        self.allowed = allowed;
    }

    /// Sets the table's size as a size update would (the RFC's examples start so).
    #[cfg(test)]
    pub fn set_max_table_size(&mut self, max: usize) {
        self.set_max_allowed_table_size(self.allowed.max(max));
        self.table.resize(max);
    }

    /// Decodes one whole header block, handing each field to `each` in order.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut each: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), DecodeError> {
        let mut pos = 0;
        let mut fields = false;
        while pos < block.len() {
            let b = block[pos];
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let i = int(block, &mut pos, 7)?;
                match i {
                    0 => return Err(DecodeError::BadIndex),
                    1..=61 => {
                        let (n, v) = STATIC[i - 1];
                        each(n.as_bytes(), v.as_bytes());
                    }
                    _ => {
                        let (n, v) = self.table.get(i - 62).ok_or(DecodeError::BadIndex)?;
                        each(n, v);
                    }
                }
                fields = true;
            } else if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the block's fields.
                let size = int(block, &mut pos, 5)?;
                if fields || size > self.allowed {
                    return Err(DecodeError::BadSizeUpdate);
                }
                self.table.resize(size);
            } else {
                // Literal (§6.2): with incremental indexing (01), else without or never.
                let indexing = b & 0xc0 == 0x40;
                let i = int(block, &mut pos, if indexing { 6 } else { 4 })?;
                let name = match i {
                    0 => string(block, &mut pos, &mut self.name, &mut self.cache, None)?,
                    1..=61 => Str::Static(STATIC[i - 1].0.as_bytes()),
                    _ if indexing => {
                        // The insertion may evict or move this entry: copy it first.
                        let (n, _) = self.table.get(i - 62).ok_or(DecodeError::BadIndex)?;
                        self.name.clear();
                        self.name.extend_from_slice(n);
                        Str::Scratch
                    }
                    _ => Str::Table(i - 62),
                };
                let key = (1..=61).contains(&i).then_some(i);
                let value = match string(block, &mut pos, &mut self.value, &mut self.cache, key)? {
                    Str::Block(a, z) => &block[a..z],
                    _ => &self.value[..],
                };
                match name {
                    Str::Table(t) => {
                        // Without indexing: the table is only read.
                        each(self.table.get(t).ok_or(DecodeError::BadIndex)?.0, value);
                    }
                    Str::Block(..) | Str::Scratch | Str::Static(_) => {
                        let name: &[u8] = match name {
                            Str::Block(a, z) => &block[a..z],
                            Str::Static(n) => n,
                            _ => &self.name[..],
                        };
                        each(name, value);
                        if indexing {
                            self.table.insert(name, value);
                        }
                    }
                }
                fields = true;
            }
        }
        Ok(())
    }
}

/// An integer with an `n`-bit prefix (§5.1) at `*pos`, which moves past it.
fn int(block: &[u8], pos: &mut usize, n: u32) -> Result<usize, DecodeError> {
    let mask = (1usize << n) - 1;
    let mut value = block[*pos] as usize & mask;
    *pos += 1;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let b = *block.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        value += ((b & 0x7f) as usize) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 21 {
            return Err(DecodeError::IntegerTooBig);
        }
    }
}

/// A string literal (§5.2) at `*pos`: where it lies in `block`, or Huffman-decoded into
/// `scratch` (through `cache`, in the slot of the static name `name` if given).
fn string(
    block: &[u8],
    pos: &mut usize,
    scratch: &mut Vec<u8>,
    cache: &mut HuffmanCache,
    name: Option<usize>,
) -> Result<Str, DecodeError> {
    let huff = *block.get(*pos).ok_or(DecodeError::Truncated)? & 0x80 != 0;
    let len = int(block, pos, 7)?;
    let (a, z) = (*pos, *pos + len);
    if z > block.len() {
        return Err(DecodeError::Truncated);
    }
    *pos = z;
    if !huff {
        return Ok(Str::Block(a, z));
    }
    cache.decode(&block[a..z], name, scratch)?;
    Ok(Str::Scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn fields(d: &mut Decoder, block: &[u8]) -> Result<Fields, DecodeError> {
        let mut out = Vec::new();
        d.decode(block, |n, v| out.push((n.to_vec(), v.to_vec())))?;
        Ok(out)
    }

    fn literal_indexed(name: &str, value: &str) -> Vec<u8> {
        let mut b = vec![0x40, name.len() as u8];
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
        b
    }

    #[test]
    fn cached_huffman_strings_decode_as_the_huffman_decoder_does() {
        // Short strings over a small alphabet repeat and share cache slots; some are
        // longer than the cache keeps. Each block: values as literals without indexing
        // on the static name 1 or a literal name, every value compared with a direct
        // decoding.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut d = Decoder::new(4096);
        for _ in 0..5_000 {
            let mut block = Vec::new();
            let mut want = Vec::new();
            for _ in 0..1 + rnd() % 3 {
                let n = if rnd() % 8 == 0 {
                    40 + rnd() % 20
                } else {
                    rnd() % 6
                };
                let text: Vec<u8> = (0..n).map(|_| b"ab01/~"[(rnd() % 6) as usize]).collect();
                let raw = huffman::encode(&text);
                // The static name's slot, or one chosen by the value's bytes.
                let name: &[u8] = if rnd() % 2 == 0 {
                    block.push(0x01);
                    b":authority"
                } else {
                    block.extend_from_slice(b"\x00\x03x-k");
                    b"x-k"
                };
                block.push(0x80 | raw.len() as u8);
                block.extend_from_slice(&raw);
                want.push((name.to_vec(), text));
            }
            assert_eq!(fields(&mut d, &block).unwrap(), want);
        }
    }

    #[test]
    fn the_table_evicts_oldest_first_and_compacts_in_place() {
        // A 100-byte table holds two entries of 32 + 1 + 17 bytes: each insertion
        // evicts the oldest and keeps the other, so the live run walks to the
        // buffer's end (200 bytes) and moves to the front, entries and all.
        let mut d = Decoder::new(100);
        let mut compactions = 0;
        for k in 0..50 {
            let value = format!("{k:0>17}");
            let tail = d.table.tail;
            let got = fields(&mut d, &literal_indexed("n", &value)).unwrap();
            assert_eq!(got[0].1, value.as_bytes());
            compactions += usize::from(d.table.tail < tail);
            assert_eq!(fields(&mut d, &[0x80 | 62]).unwrap()[0].1, value.as_bytes());
            if k > 0 {
                let older = format!("{:0>17}", k - 1);
                assert_eq!(fields(&mut d, &[0x80 | 63]).unwrap()[0].1, older.as_bytes());
            }
            assert_eq!(fields(&mut d, &[0x80 | 64]), Err(DecodeError::BadIndex));
            let t = &d.table;
            assert!(t.size <= 100 && t.tail <= t.bytes.len());
            for e in &t.entries {
                assert!(t.head <= e.at && e.at + e.name + e.value <= t.tail, "{t:?}");
            }
        }
        assert!(compactions >= 4, "{compactions}");
        // Two small entries fit together; the newer is 62.
        let mut d = Decoder::new(100);
        fields(&mut d, &literal_indexed("a", "1")).unwrap();
        fields(&mut d, &literal_indexed("b", "2")).unwrap();
        let got = fields(&mut d, &[0x80 | 62, 0x80 | 63]).unwrap();
        assert_eq!(
            got,
            [
                (b"b".to_vec(), b"2".to_vec()),
                (b"a".to_vec(), b"1".to_vec())
            ]
        );
        // An entry larger than the table empties it (§4.4).
        fields(&mut d, &literal_indexed("n", &"x".repeat(80))).unwrap();
        assert_eq!(fields(&mut d, &[0x80 | 62]), Err(DecodeError::BadIndex));
    }

    #[test]
    fn a_name_from_the_entry_being_evicted_is_copied_first() {
        // Table of 70: one entry "name"/"v1" (38); inserting with its name (index 62)
        // evicts it, yet the new entry keeps the name.
        let mut d = Decoder::new(70);
        fields(&mut d, &literal_indexed("name", "v1")).unwrap();
        let block = [0x40 | 62, 0x02, b'v', b'2'];
        assert_eq!(fields(&mut d, &block).unwrap()[0].0, b"name");
        let got = fields(&mut d, &[0x80 | 62]).unwrap();
        assert_eq!(got, [(b"name".to_vec(), b"v2".to_vec())]);
        assert_eq!(fields(&mut d, &[0x80 | 63]), Err(DecodeError::BadIndex));
    }

    #[test]
    fn size_updates_are_bounded_and_come_first() {
        let mut d = Decoder::new(4096);
        fields(&mut d, &literal_indexed("a", "1")).unwrap();
        // To 0 empties the table; back up to 4096 is allowed.
        fields(&mut d, &[0x20]).unwrap();
        assert_eq!(fields(&mut d, &[0x80 | 62]), Err(DecodeError::BadIndex));
        fields(&mut d, &[0x3f, 0xe1, 0x1f]).unwrap();
        // 4097 is above the allowed size.
        assert_eq!(
            fields(&mut d, &[0x3f, 0xe2, 0x1f]),
            Err(DecodeError::BadSizeUpdate)
        );
        // After a field, a size update is an error.
        assert_eq!(
            fields(&mut d, &[0x82, 0x20]),
            Err(DecodeError::BadSizeUpdate)
        );
    }

    #[test]
    fn truncated_and_oversized_input_is_refused() {
        let mut d = Decoder::new(4096);
        assert_eq!(fields(&mut d, &[0xff]), Err(DecodeError::Truncated));
        assert_eq!(
            fields(&mut d, &[0x00, 0x05, b'a']),
            Err(DecodeError::Truncated)
        );
        assert_eq!(fields(&mut d, &[0x00]), Err(DecodeError::Truncated));
        assert_eq!(
            fields(&mut d, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(DecodeError::IntegerTooBig)
        );
        // A Huffman name with bad padding.
        assert_eq!(
            fields(&mut d, &[0x00, 0x81, 0x18, 0x00]),
            Err(DecodeError::Huffman)
        );
    }
}
