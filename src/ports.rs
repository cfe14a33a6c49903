//! The 4-tuple budget: how many connections fit between a set of source IPs and a set
//! of destinations, given the kernel's ephemeral port range.
//!
//! A TCP connection is named by (source IP, source port, destination IP, destination
//! port). When the generator binds a source IP with `IP_BIND_ADDRESS_NO_PORT` (or does
//! not bind at all), the kernel picks the source port at `connect()` time and only needs
//! it to be unique for that (source IP, destination) pair, so every pair has its own
//! `ip_local_port_range` worth of ports. (Binding a source IP *with* port 0 instead picks
//! the port at bind time, unique per source IP over all destinations: the whole plan
//! then shares one range per source IP. The engine must not do that.)
//!
//! So the budget is `sources x destinations x range size`, and it holds only if the
//! connections are spread evenly over the pairs: [`Placement`] assigns connection `i`
//! to a pair such that any prefix of connections is balanced over sources, over
//! destinations and over pairs (each within one of the others). [`check_budget`]
//! refuses a plan whose busiest pair needs more ports than the range has, naming the
//! numbers and the fixes; [`time_wait_warning`] does the same for connection-per-request
//! runs, where closed connections keep their port in TIME_WAIT for a minute.
//!
//! The budget is an upper bound: ports held by other sockets (other processes, TIME_WAIT
//! from a previous run, `ip_local_reserved_ports`) come off it, and the engine still maps
//! a late EADDRNOTAVAIL to the same wall (see `preflight/walls.rs`).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// Most source addresses one `--source-ip` list may expand to: a /16 of IPv4. Each pair
/// already offers up to 64k ports, so 65,536 sources cover any plan a process can hold.
pub const SOURCE_IPS_MAX: usize = 65_536;

/// The widest range the widening fix suggests: ports below 1024 are for services.
const WIDE_RANGE: PortRange = PortRange {
    lo: 1024,
    hi: 65535,
};

/// Parses a `--source-ip` list: comma-separated items, each one of
///
/// - a single address, IPv4 or IPv6: `127.0.0.2`, `::1`;
/// - an inclusive range of the same family: `127.0.0.2-127.0.0.60`, `fd00::1-fd00::9`,
///   or for IPv4 the short form that replaces the last octet: `127.0.0.2-60`;
/// - a CIDR block: `10.0.0.0/29`, `fd00::/120` (IPv6 only /112 or narrower).
///
/// A CIDR block yields *every* address in it, network and broadcast included: these are
/// addresses to bind as sources, not a subnet to route to. On loopback all of 127/8 is
/// local; on a real interface only addresses assigned to the host can be bound, which is
/// the caller's check (bind fails with EADDRNOTAVAIL). The block must be written with
/// its host bits clear (`10.0.0.5/29` is an error naming `10.0.0.0/29`), so a typo does
/// not silently pick other addresses.
///
/// The result keeps the order given, drops duplicates, and holds at most
/// [`SOURCE_IPS_MAX`] addresses. Unspecified (`0.0.0.0`, `::`), multicast and the IPv4
/// broadcast address are refused: none can be a connection's source. Errors are one
/// line naming the item, without the flag (the caller prefixes `--source-ip: `).
pub fn parse_source_ips(spec: &str) -> Result<Vec<IpAddr>, String> {
    if spec.trim().is_empty() {
        return Err(
            "expected addresses such as 127.0.0.2, 127.0.0.2-127.0.0.60 or \
                    10.0.0.0/29, got an empty list"
                .into(),
        );
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for item in spec.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("{spec:?}: empty item in the list"));
        }
        let (first, count) = parse_item(item)?;
        if count > SOURCE_IPS_MAX as u128 {
            return Err(too_many(item));
        }
        for k in 0..count {
            let ip = offset(first, k);
            if !is_source(ip) {
                return Err(format!(
                    "{item}: {ip} cannot be a source address (unspecified, multicast or broadcast)"
                ));
            }
            if seen.insert(ip) {
                if out.len() == SOURCE_IPS_MAX {
                    return Err(too_many(item));
                }
                out.push(ip);
            }
        }
    }
    Ok(out)
}

fn too_many(item: &str) -> String {
    format!("{item}: the list would hold more than {SOURCE_IPS_MAX} addresses")
}

/// One item -> (first address, number of addresses). Counts are u128 so an IPv6 range
/// is measured, not expanded, before the cap is checked.
fn parse_item(item: &str) -> Result<(IpAddr, u128), String> {
    if let Some((addr, prefix)) = item.split_once('/') {
        return parse_cidr(item, addr.trim(), prefix.trim());
    }
    if let Some((a, b)) = item.split_once('-') {
        return parse_range(item, a.trim(), b.trim());
    }
    let ip = parse_ip(item, item)?;
    Ok((ip, 1))
}

fn parse_ip(item: &str, s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>()
        .map_err(|_| format!("{item}: {s:?} is not an IP address"))
}

fn parse_cidr(item: &str, addr: &str, prefix: &str) -> Result<(IpAddr, u128), String> {
    let ip = parse_ip(item, addr)?;
    let prefix: u32 = prefix
        .parse()
        .map_err(|_| format!("{item}: {prefix:?} is not a prefix length"))?;
    let (bits, narrowest_v6) = match ip {
        IpAddr::V4(_) => (32, 0),
        IpAddr::V6(_) => (128, 112),
    };
    if prefix > bits {
        return Err(format!(
            "{item}: prefix /{prefix} is longer than the address (/{bits})"
        ));
    }
    if bits == 128 && prefix < narrowest_v6 {
        return Err(format!(
            "{item}: an IPv6 block must be /{narrowest_v6} or narrower \
             (at most {SOURCE_IPS_MAX} addresses)"
        ));
    }
    let host_bits = bits - prefix;
    let value = to_u128(ip);
    let mask = if host_bits == 0 {
        0
    } else {
        (1u128 << host_bits) - 1
    };
    if value & mask != 0 {
        let network = from_u128(ip, value & !mask);
        return Err(format!(
            "{item}: host bits are set; the block is {network}/{prefix}"
        ));
    }
    Ok((ip, 1u128 << host_bits))
}

fn parse_range(item: &str, a: &str, b: &str) -> Result<(IpAddr, u128), String> {
    let start = parse_ip(item, a)?;
    let end = match (start, b.parse::<IpAddr>()) {
        (_, Ok(end)) => end,
        (IpAddr::V4(s), Err(_)) => match b.parse::<u8>() {
            Ok(last) => {
                let [o0, o1, o2, _] = s.octets();
                IpAddr::V4(Ipv4Addr::new(o0, o1, o2, last))
            }
            Err(_) => {
                return Err(format!(
                    "{item}: {b:?} is neither an address nor a last octet (0-255)"
                ));
            }
        },
        (IpAddr::V6(_), Err(_)) => return Err(format!("{item}: {b:?} is not an IPv6 address")),
    };
    if start.is_ipv4() != end.is_ipv4() {
        return Err(format!("{item}: the range mixes IPv4 and IPv6"));
    }
    let (s, e) = (to_u128(start), to_u128(end));
    if e < s {
        return Err(format!("{item}: range end is before its start"));
    }
    // e - s < 2^128 - 1, so the +1 cannot overflow unless the range is all of IPv6.
    Ok((start, (e - s).saturating_add(1)))
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address with value `v` in the family of `like` (`v` fits that family).
fn from_u128(like: IpAddr, v: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(v as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// `first + k`; the callers only ask for addresses inside a parsed item.
fn offset(first: IpAddr, k: u128) -> IpAddr {
    from_u128(first, to_u128(first).wrapping_add(k))
}

fn is_source(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// The kernel's ephemeral port range (`net.ipv4.ip_local_port_range`, which applies to
/// IPv6 too), inclusive, `lo <= hi` always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    /// `None` when `lo > hi`.
    pub fn new(lo: u16, hi: u16) -> Option<PortRange> {
        (lo <= hi).then_some(PortRange { lo, hi })
    }

    pub fn lo(self) -> u16 {
        self.lo
    }

    pub fn hi(self) -> u16 {
        self.hi
    }

    /// Ports in the range (1..=65536).
    pub fn size(self) -> u32 {
        u32::from(self.hi) - u32::from(self.lo) + 1
    }
}

/// `32768-60999`.
impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.lo, self.hi)
    }
}

/// Reads `<root>/proc/sys/net/ipv4/ip_local_port_range` (two numbers separated by white
/// space). `root` is `/` in production and a fixture directory in tests.
pub fn read_port_range(root: &Path) -> io::Result<PortRange> {
    let path = root.join("proc/sys/net/ipv4/ip_local_port_range");
    let text = std::fs::read_to_string(&path)?;
    parse_port_range(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: expected two ports \"LOW HIGH\", got {:?}",
                path.display(),
                text.trim()
            ),
        )
    })
}

fn parse_port_range(text: &str) -> Option<PortRange> {
    let mut it = text.split_whitespace();
    let lo = it.next()?.parse().ok()?;
    let hi = it.next()?.parse().ok()?;
    if it.next().is_some() {
        return None;
    }
    PortRange::new(lo, hi)
}

/// Where each connection goes: connection `i` -> (source index, destination index).
///
/// Pair number `p = i mod (S x D)` is mapped with the Chinese-remainder layout
/// `(p mod S, (p + p / L) mod D)` where `L = lcm(S, D)`: a bijection from pair numbers to
/// pairs in which every prefix is balanced over sources and over destinations. Reusing
/// the index of a closed connection for its reconnect keeps it on the same pair, so the
/// per-pair counts never drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    connections: usize,
    sources: usize,
    targets: usize,
    /// lcm(sources, targets), in u128 so no input can overflow it.
    lcm: u128,
}

impl Placement {
    /// `sources == 0` means "let the kernel choose the source address" and counts as one
    /// source; `targets == 0` is treated as one destination (the plan always has one).
    pub fn new(connections: usize, sources: usize, targets: usize) -> Placement {
        let sources = sources.max(1);
        let targets = targets.max(1);
        let lcm = (sources / gcd(sources, targets)) as u128 * targets as u128;
        Placement {
            connections,
            sources,
            targets,
            lcm,
        }
    }

    /// (source index, destination index) of connection `conn_index` (any index; it wraps).
    pub fn pair_of(&self, conn_index: usize) -> (usize, usize) {
        // In u128: sources x targets may overflow usize for absurd inputs.
        let (s, t) = (self.sources as u128, self.targets as u128);
        let p = conn_index as u128 % (s * t);
        let block = p / self.lcm;
        ((p % s) as usize, ((p % t + block % t) % t) as usize)
    }

    /// Source slots (at least 1).
    pub fn sources(&self) -> usize {
        self.sources
    }

    /// Destinations (at least 1).
    pub fn targets(&self) -> usize {
        self.targets
    }

    /// (source, destination) pairs, saturating.
    pub fn pairs(&self) -> usize {
        self.sources.saturating_mul(self.targets)
    }

    /// Connections on the busiest pair: `ceil(connections / pairs)`.
    pub fn max_per_pair(&self) -> usize {
        self.connections.div_ceil(self.pairs())
    }
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A plan that fits the port space, with its numbers for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub placement: Placement,
    pub range: PortRange,
    /// Connections on the busiest (source, destination) pair.
    pub per_pair_max: usize,
    /// Ports left on the busiest pair: `range.size() - per_pair_max`.
    pub per_pair_spare: u32,
}

/// A plan that cannot fit: its busiest (source, destination) pair needs more ports than
/// `ip_local_port_range` has. Displays as one line with the numbers and the fixes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct BudgetError {
    pub connections: usize,
    /// Source slots counted (kernel's choice = 1).
    pub sources: usize,
    pub targets: usize,
    pub per_pair: usize,
    pub range: PortRange,
    /// Source IPs that would fit the plan with the same destinations and range.
    pub sources_needed: usize,
    /// Destinations that would fit the plan with the same sources and range.
    pub targets_needed: usize,
}

impl BudgetError {
    fn render(&self) -> String {
        let size = self.range.size();
        let mut fixes = format!(
            "use at least {n} source IPs (e.g. --source-ip {ex} on loopback gives {n} x {size}), \
             at least {t} destinations (--target, repeated)",
            n = self.sources_needed,
            ex = loopback_example(self.sources_needed),
            t = self.targets_needed,
        );
        let wide = WIDE_RANGE.size() as usize;
        if (size as usize) < wide {
            fixes.push_str(&format!(
                ", or widen the range (sysctl -w net.ipv4.ip_local_port_range=\"{} {}\" gives {wide}",
                WIDE_RANGE.lo, WIDE_RANGE.hi,
            ));
            if self.per_pair > wide {
                let n = self
                    .connections
                    .div_ceil(self.targets.max(1).saturating_mul(wide));
                fixes.push_str(&format!("; then {n} source IPs suffice"));
            }
            fixes.push(')');
        }
        format!(
            "ports: {c} connections over {s} x {t} need {pp} ports per (source, destination) \
             pair but ip_local_port_range {r} gives {size}; {fixes}",
            c = self.connections,
            s = plural(self.sources, "source IP", "source IPs"),
            t = plural(self.targets, "destination", "destinations"),
            pp = self.per_pair,
            r = self.range,
        )
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `127.0.0.2-127.0.0.<n+1>` (or further into 127/8) for `n` loopback source addresses.
fn loopback_example(n: usize) -> String {
    let first = u32::from(Ipv4Addr::new(127, 0, 0, 2));
    let n = n.clamp(1, 1 << 24) as u32;
    let last = Ipv4Addr::from(first.saturating_add(n - 1));
    format!("127.0.0.2-{last}")
}

/// Checks that `connections` placed by [`Placement`] over `sources` source IPs (0 = the
/// kernel's choice, one source) and `targets` destinations fit `range` on every pair.
pub fn check_budget(
    connections: usize,
    sources: usize,
    targets: usize,
    range: PortRange,
) -> Result<Budget, BudgetError> {
    let placement = Placement::new(connections, sources, targets);
    let per_pair = placement.max_per_pair();
    let size = range.size() as usize;
    if per_pair <= size {
        return Ok(Budget {
            placement,
            range,
            per_pair_max: per_pair,
            per_pair_spare: (size - per_pair) as u32,
        });
    }
    let (s, t) = (placement.sources(), placement.targets());
    Err(BudgetError {
        connections,
        sources: s,
        targets: t,
        per_pair,
        range,
        sources_needed: connections.div_ceil(t.saturating_mul(size)),
        targets_needed: connections.div_ceil(s.saturating_mul(size)),
    })
}

/// Connection-per-request mode: every request closes a connection, and the closing side
/// (the generator, unless `--linger0` resets instead) keeps its port in TIME_WAIT for
/// `time_wait_s` (Linux: 60 s, fixed). At `rate_per_s` the run holds about
/// `rate x time_wait` ports; the warning fires when that exceeds `pairs x range size`,
/// naming how soon the range runs out and the fixes. `None` when it fits or the inputs
/// are not finite positive numbers.
pub fn time_wait_warning(
    rate_per_s: f64,
    pairs: usize,
    range: PortRange,
    time_wait_s: f64,
) -> Option<crate::diagnosis::Diagnosis> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if !ok(rate_per_s) || !ok(time_wait_s) {
        return None;
    }
    let pairs = pairs.max(1);
    let capacity = pairs as f64 * f64::from(range.size());
    let held = rate_per_s * time_wait_s;
    if held <= capacity {
        return None;
    }
    Some(crate::diagnosis::Diagnosis::TimeWaitExhaustsPorts {
        rate_per_s,
        held,
        time_wait_s,
        pairs,
        range_size: range.size(),
        range: range.to_string(),
        capacity,
        factor: (held / capacity).ceil(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range(lo: u16, hi: u16) -> PortRange {
        PortRange::new(lo, hi).unwrap()
    }

    #[test]
    fn single_addresses_ranges_and_blocks() {
        assert_eq!(
            parse_source_ips("127.0.0.2").unwrap(),
            vec![v4("127.0.0.2")]
        );
        assert_eq!(parse_source_ips(" ::1 ").unwrap(), vec![v4("::1")]);
        let r = parse_source_ips("127.0.0.2-127.0.0.60").unwrap();
        assert_eq!(r.len(), 59);
        assert_eq!((r[0], r[58]), (v4("127.0.0.2"), v4("127.0.0.60")));
        assert_eq!(parse_source_ips("127.0.0.2-60").unwrap(), r);
        let b = parse_source_ips("10.0.0.0/29").unwrap();
        assert_eq!(b.len(), 8, "network and broadcast of the block included");
        assert_eq!((b[0], b[7]), (v4("10.0.0.0"), v4("10.0.0.7")));
        assert_eq!(
            parse_source_ips("10.0.0.1/32").unwrap(),
            vec![v4("10.0.0.1")]
        );
        assert_eq!(parse_source_ips("fd00::/120").unwrap().len(), 256);
        assert_eq!(
            parse_source_ips("fd00::1-fd00::3").unwrap(),
            vec![v4("fd00::1"), v4("fd00::2"), v4("fd00::3")]
        );
        // Crossing an octet boundary.
        let x = parse_source_ips("10.0.0.254-10.0.1.1").unwrap();
        assert_eq!(
            x,
            vec![
                v4("10.0.0.254"),
                v4("10.0.0.255"),
                v4("10.0.1.0"),
                v4("10.0.1.1")
            ]
        );
    }

    #[test]
    fn order_kept_and_duplicates_dropped() {
        let r = parse_source_ips("127.0.0.5,127.0.0.3-127.0.0.6, 127.0.0.1").unwrap();
        assert_eq!(
            r,
            vec![
                v4("127.0.0.5"),
                v4("127.0.0.3"),
                v4("127.0.0.4"),
                v4("127.0.0.6"),
                v4("127.0.0.1")
            ]
        );
    }

    #[test]
    fn errors_name_the_item_and_the_problem() {
        let cases = [
            (
                "127.0.0.9-127.0.0.2",
                "127.0.0.9-127.0.0.2: range end is before its start",
            ),
            ("127.0.0.9-2", "127.0.0.9-2: range end is before its start"),
            ("", "empty list"),
            ("127.0.0.1,,127.0.0.2", "empty item"),
            ("127.0.0.1,", "empty item"),
            ("localhost", "\"localhost\" is not an IP address"),
            ("127.0.0.2-300", "neither an address nor a last octet"),
            ("127.0.0.2-::1", "mixes IPv4 and IPv6"),
            ("10.0.0.5/29", "host bits are set; the block is 10.0.0.0/29"),
            ("10.0.0.0/33", "longer than the address"),
            ("10.0.0.0/x", "not a prefix length"),
            ("fd00::/64", "/112 or narrower"),
            ("10.0.0.0/8", "more than 65536 addresses"),
            ("0.0.0.0-255.255.255.255", "more than 65536 addresses"),
            (
                "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                "more than 65536 addresses",
            ),
            ("0.0.0.0", "cannot be a source address"),
            ("224.0.0.1", "cannot be a source address"),
            ("255.255.255.255", "cannot be a source address"),
            ("fd00::1-x", "is not an IPv6 address"),
        ];
        for (spec, needle) in cases {
            let e = parse_source_ips(spec).unwrap_err();
            assert!(e.contains(needle), "{spec:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn the_cap_counts_distinct_addresses() {
        // Two /16s: each alone fits, together they exceed the cap.
        assert_eq!(parse_source_ips("10.0.0.0/16").unwrap().len(), 65_536);
        assert_eq!(
            parse_source_ips("10.0.0.0/16,10.0.0.0/16").unwrap().len(),
            65_536
        );
        let e = parse_source_ips("10.0.0.0/16,10.1.0.0").unwrap_err();
        assert!(e.starts_with("10.1.0.0: "), "{e}");
    }

    #[test]
    fn port_range_reads_the_proc_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("proc/sys/net/ipv4");
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("ip_local_port_range");
        std::fs::write(&f, "32768\t60999\n").unwrap();
        let r = read_port_range(dir.path()).unwrap();
        assert_eq!((r.lo(), r.hi(), r.size()), (32768, 60999, 28232));
        assert_eq!(r.to_string(), "32768-60999");
        for bad in ["", "32768", "60999 32768", "1 2 3", "a b", "0 70000"] {
            std::fs::write(&f, bad).unwrap();
            let e = read_port_range(dir.path()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{bad:?}");
        }
        assert_eq!(
            read_port_range(&dir.path().join("nowhere"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(range(0, 65535).size(), 65536);
        assert!(PortRange::new(2, 1).is_none());
    }

    #[test]
    fn placement_spreads_over_all_pairs() {
        let p = Placement::new(12, 2, 3);
        let pairs: Vec<_> = (0..6).map(|i| p.pair_of(i)).collect();
        let mut sorted = pairs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "{pairs:?}");
        assert_eq!(p.pair_of(6), p.pair_of(0), "wraps");
        assert_eq!(p.max_per_pair(), 2);
        // 0 sources = the kernel's choice = one source.
        let k = Placement::new(5, 0, 2);
        assert_eq!((k.sources(), k.pairs(), k.max_per_pair()), (1, 2, 3));
        assert_eq!(k.pair_of(3), (0, 1));
        assert_eq!(Placement::new(0, 4, 4).max_per_pair(), 0);
        let huge = Placement::new(usize::MAX, usize::MAX, usize::MAX - 1);
        assert_eq!(huge.max_per_pair(), 1);
        let (a, b) = huge.pair_of(usize::MAX);
        assert!(a < huge.sources() && b < huge.targets());
    }

    #[test]
    fn budget_fits_or_names_numbers_and_fixes() {
        let r = range(32768, 60999);
        let b = check_budget(28_232, 0, 1, r).unwrap();
        assert_eq!((b.per_pair_max, b.per_pair_spare), (28_232, 0));
        let b = check_budget(100_000, 4, 1, r).unwrap();
        assert_eq!(b.per_pair_max, 25_000);

        let e = check_budget(100_000, 0, 1, r).unwrap_err();
        assert_eq!(
            (e.sources_needed, e.targets_needed, e.per_pair),
            (4, 4, 100_000)
        );
        assert_eq!(
            e.to_string(),
            "ports: 100000 connections over 1 source IP x 1 destination need 100000 ports per \
             (source, destination) pair but ip_local_port_range 32768-60999 gives 28232; use at \
             least 4 source IPs (e.g. --source-ip 127.0.0.2-127.0.0.5 on loopback gives 4 x \
             28232), at least 4 destinations (--target, repeated), or widen the range (sysctl -w \
             net.ipv4.ip_local_port_range=\"1024 65535\" gives 64512; then 2 source IPs suffice)"
        );

        let e = check_budget(1_000_000, 3, 2, r).unwrap_err();
        assert_eq!((e.sources_needed, e.targets_needed), (18, 12));
        let s = e.to_string();
        assert!(
            s.contains("3 source IPs x 2 destinations need 166667 ports"),
            "{s}"
        );
        assert!(s.contains("--source-ip 127.0.0.2-127.0.0.19 "), "{s}");
        assert!(s.contains("gives 64512; then 8 source IPs suffice)"), "{s}");
        // Already wide: no widening advice.
        let e = check_budget(200_000, 1, 1, range(1024, 65535)).unwrap_err();
        assert!(!e.to_string().contains("sysctl"), "{e}");
        assert_eq!(e.sources_needed, 4);
    }

    #[test]
    fn time_wait_warns_only_past_the_range() {
        let r = range(32768, 60999);
        // 400/s x 60 s = 24000 < 28232.
        assert_eq!(time_wait_warning(400.0, 1, r, 60.0), None);
        let w = time_wait_warning(1000.0, 1, r, 60.0).unwrap().to_string();
        for needle in [
            "1000/s",
            "60000 ports in TIME_WAIT",
            "1 (source, destination) pair x 28232",
            "after about 28.2 s",
            "--linger0",
            "tcp_tw_reuse=1",
            "3x as many source IPs",
        ] {
            assert!(w.contains(needle), "{needle}: {w}");
        }
        assert_eq!(time_wait_warning(1000.0, 3, r, 60.0), None);
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
            assert_eq!(time_wait_warning(bad, 1, r, 60.0), None);
            assert_eq!(time_wait_warning(1e9, 1, r, bad), None);
        }
        assert!(time_wait_warning(1e9, 0, r, 60.0).is_some());
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "[0-9a-f.:/, -]{0,40}") {
            let _ = parse_source_ips(&s);
        }

        #[test]
        fn parse_never_panics_on_near_valid(
            a in any::<u32>(), b in any::<u32>(), p in 0u32..40, sep in 0usize..3,
        ) {
            let (a, b) = (Ipv4Addr::from(a), Ipv4Addr::from(b));
            let s = match sep {
                0 => format!("{a}-{b}"),
                1 => format!("{a}/{p}"),
                _ => format!("{a}-{}", p * 7),
            };
            if let Ok(v) = parse_source_ips(&s) {
                prop_assert!(!v.is_empty() && v.len() <= SOURCE_IPS_MAX);
            }
        }

        #[test]
        fn placement_is_balanced(c in 0usize..5000, s in 0usize..12, t in 1usize..12) {
            let p = Placement::new(c, s, t);
            let (ns, nt) = (p.sources(), p.targets());
            let mut per_pair = vec![0usize; ns * nt];
            let mut per_src = vec![0usize; ns];
            let mut per_dst = vec![0usize; nt];
            for i in 0..c {
                let (a, b) = p.pair_of(i);
                prop_assert!(a < ns && b < nt);
                per_pair[a * nt + b] += 1;
                per_src[a] += 1;
                per_dst[b] += 1;
            }
            for v in [&per_pair, &per_src, &per_dst] {
                let (lo, hi) = (v.iter().min().unwrap(), v.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "{:?}", v);
            }
            prop_assert_eq!(*per_pair.iter().max().unwrap(), p.max_per_pair());
        }

        #[test]
        fn budget_agrees_with_placement(
            c in 0usize..2_000_000, s in 0usize..50, t in 0usize..5, lo in 1024u16..60000,
        ) {
            let r = range(lo, 60999);
            match check_budget(c, s, t, r) {
                Ok(b) => prop_assert!(b.per_pair_max <= r.size() as usize),
                Err(e) => {
                    prop_assert!(e.per_pair > r.size() as usize);
                    // The suggested counts really fit.
                    prop_assert!(check_budget(c, e.sources_needed, t, r).is_ok());
                    prop_assert!(check_budget(c, s, e.targets_needed, r).is_ok());
                }
            }
        }
    }
}
