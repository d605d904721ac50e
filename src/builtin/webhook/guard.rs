//! The SSRF guard: webhook targets that resolve to loopback, private, link-local,
//! unspecified, documentation and other non-public addresses are refused unless allowed.
//!
//! The check runs inside ureq's name resolution ([`GuardedResolver`]), on every address the
//! name resolves to, and the connection goes to the addresses that were checked. Checking
//! the name first and connecting after a second lookup would let DNS rebinding (a name
//! that answers a public address, then a private one) slip through.
//!
//! What is refused ([`forbidden_reason`]) follows the IANA special-purpose address
//! registries (RFC 6890 and its updates): every block that is not "globally reachable", and
//! the documentation blocks, which are not routed at all. IPv6 is judged the other way
//! round too: only global unicast (2000::/3) can pass, so a block assigned later outside it
//! is refused without a change here. IPv6 forms that carry an IPv4 address (IPv4-mapped,
//! NAT64 well-known prefix, 6to4) are judged by that address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Why an address is not a public webhook target, or `None` when it is one.
pub(crate) fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => "unspecified",
        (0, _, _) => "\"this network\" (0.0.0.0/8)",
        (127, _, _) => "loopback",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared address space (CGNAT, 100.64.0.0/10)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) => "documentation (192.0.2.0/24)",
        (198, 51, 100) => "documentation (198.51.100.0/24)",
        (203, 0, 113) => "documentation (203.0.113.0/24)",
        (192, 88, 99) => "deprecated 6to4 relay anycast (192.88.99.0/24)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved or broadcast",
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // Addresses that carry an IPv4 address are judged by it: mapped (::ffff:a.b.c.d),
    // NAT64 with the well-known prefix (64:ff9b::/96) and 6to4 (2002::/16).
    let s = ip.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return forbidden_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return forbidden_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        // NAT64 for a network's own translators (RFC 8215): behind it is whatever IPv4
        // network that operator chose, private ones included.
        0x64 if s[1] == 0xff9b && s[2] == 1 => "NAT64 local-use (64:ff9b:1::/48)",
        // ::/96 without the loopback and unspecified: the old IPv4-compatible form.
        0 if s[1..6] == [0; 5] => "IPv4-compatible (deprecated, ::/96)",
        x if x & 0xff00 == 0 => "reserved (::/8)",
        0x100 if s[1..4] == [0; 3] => "discard-only (100::/64)",
        // Teredo carries a client's IPv4 address (obscured) and a server's: a way around
        // the IPv4 checks, and never a webhook receiver's address.
        0x2001 if s[1] == 0 => "Teredo (2001::/32)",
        0x2001 if s[1] == 2 && s[2] == 0 => "benchmarking (2001:2::/48)",
        0x2001 if s[1] & 0xfff0 == 0x10 || s[1] & 0xfff0 == 0x20 => {
            "ORCHID (2001:10::/28, 2001:20::/28)"
        }
        0x2001 if s[1] < 0x200 => "IETF protocol assignments (2001::/23)",
        0x2001 if s[1] == 0xdb8 => "documentation (2001:db8::/32)",
        0x3fff if s[1] < 0x1000 => "documentation (3fff::/20)",
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local",
        x if x & 0xffc0 == 0xfec0 => "site-local",
        x if x & 0xff00 == 0xff00 => "multicast",
        x if x & 0xe000 != 0x2000 => "not global unicast (outside 2000::/3)",
        _ => return None,
    })
}

/// The guard's refusal, carried through ureq as [`ureq::Error::Other`] so the handler can
/// tell it from a network failure (it is permanent: retrying cannot change it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetRefused {
    pub(crate) host: String,
    pub(crate) ip: IpAddr,
    pub(crate) reason: &'static str,
}

impl fmt::Display for TargetRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host == self.ip.to_string() || self.host == format!("[{}]", self.ip) {
            write!(f, "target {} is a {} address", self.ip, self.reason)
        } else {
            write!(
                f,
                "target host {} resolves to {}, a {} address",
                self.host, self.ip, self.reason
            )
        }
    }
}

impl std::error::Error for TargetRefused {}

/// ureq's default resolver, plus the SSRF check on every resolved address unless private
/// targets are allowed.
#[derive(Debug, Default)]
pub(crate) struct GuardedResolver {
    inner: DefaultResolver,
    allow_private: bool,
}

impl GuardedResolver {
    pub(crate) fn new(allow_private: bool) -> GuardedResolver {
        GuardedResolver {
            inner: DefaultResolver::default(),
            allow_private,
        }
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.inner.resolve(uri, config, timeout)?;
        if self.allow_private {
            return Ok(addrs);
        }
        // Every address is checked, not just the first: the connection may try any of them.
        for addr in addrs.iter() {
            if let Some(reason) = forbidden_reason(addr.ip()) {
                return Err(ureq::Error::Other(Box::new(TargetRefused {
                    host: uri.host().unwrap_or_default().to_string(),
                    ip: addr.ip(),
                    reason,
                })));
            }
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ip: &str) -> Option<&'static str> {
        forbidden_reason(ip.parse().expect("test IP"))
    }

    #[test]
    fn non_public_ipv4_ranges_are_refused() {
        for (ip, why) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared address space (CGNAT, 100.64.0.0/10)"),
            (
                "100.127.255.254",
                "shared address space (CGNAT, 100.64.0.0/10)",
            ),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved or broadcast"),
        ] {
            assert_eq!(reason(ip), Some(why), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "8.8.8.8",
            "1.1.1.1",
        ] {
            assert_eq!(reason(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn non_public_ipv6_ranges_are_refused_and_embedded_ipv4_is_judged() {
        for (ip, why) in [
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fc00::1", "unique local (fc00::/7)"),
            ("fd12:3456::1", "unique local (fc00::/7)"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:c0a8:0101::1", "private"),
            ("::7f00:1", "IPv4-compatible (deprecated, ::/96)"),
        ] {
            assert_eq!(reason(ip), Some(why), "{ip}");
        }
        for ip in [
            "2606:2800:220:1:248:1893:25c8:1946",
            "::ffff:93.184.216.34",
            "2001:4860:4860::8888",
        ] {
            assert_eq!(reason(ip), None, "{ip} is public");
        }
    }

    /// Documentation, Teredo, NAT64 local-use and the other special-purpose blocks: none
    /// reaches a public receiver, so each is refused, naming the block.
    #[test]
    fn documentation_teredo_nat64_local_and_other_special_blocks_are_refused() {
        for (ip, why) in [
            ("192.0.2.1", "documentation (192.0.2.0/24)"),
            ("192.0.2.255", "documentation (192.0.2.0/24)"),
            ("198.51.100.7", "documentation (198.51.100.0/24)"),
            ("203.0.113.200", "documentation (203.0.113.0/24)"),
            (
                "192.88.99.1",
                "deprecated 6to4 relay anycast (192.88.99.0/24)",
            ),
            ("198.19.255.255", "benchmarking (198.18.0.0/15)"),
            ("241.1.2.3", "reserved or broadcast"),
            ("239.255.255.250", "multicast"),
            ("2001:db8::1", "documentation (2001:db8::/32)"),
            ("2001:db8:ffff:ffff::1", "documentation (2001:db8::/32)"),
            ("3fff::1", "documentation (3fff::/20)"),
            ("2001::1", "Teredo (2001::/32)"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo (2001::/32)"),
            ("64:ff9b:1::a00:1", "NAT64 local-use (64:ff9b:1::/48)"),
            (
                "64:ff9b:1:ffff::808:808",
                "NAT64 local-use (64:ff9b:1::/48)",
            ),
            ("2001:2::1", "benchmarking (2001:2::/48)"),
            ("2001:20::1", "ORCHID (2001:10::/28, 2001:20::/28)"),
            ("2001:1::1", "IETF protocol assignments (2001::/23)"),
            ("100::1", "discard-only (100::/64)"),
            ("::ffff:0:7f00:1", "reserved (::/8)"),
            ("64:ff9b:2::1", "reserved (::/8)"),
            ("5f00::1", "not global unicast (outside 2000::/3)"),
            ("4000::1", "not global unicast (outside 2000::/3)"),
            ("fec0::1", "site-local"),
            ("ff0e::1", "multicast"),
            // IPv6 forms that carry an IPv4 address are judged by it.
            ("::ffff:192.0.2.1", "documentation (192.0.2.0/24)"),
            (
                "::ffff:100.64.0.1",
                "shared address space (CGNAT, 100.64.0.0/10)",
            ),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::c633:6401", "documentation (198.51.100.0/24)"),
            (
                "64:ff9b::6440:1",
                "shared address space (CGNAT, 100.64.0.0/10)",
            ),
            ("64:ff9b::a00:1", "private"),
            ("2002:cb00:7101::1", "documentation (203.0.113.0/24)"),
            ("2002:7f00:1::", "loopback"),
            ("2002:e000:1::", "multicast"),
            ("::c0a8:101", "IPv4-compatible (deprecated, ::/96)"),
        ] {
            assert_eq!(reason(ip), Some(why), "{ip}");
        }
        for ip in [
            "192.0.1.255",
            "192.0.3.1",
            "198.51.99.1",
            "198.51.101.1",
            "203.0.112.1",
            "203.0.114.1",
            "192.88.98.1",
            "198.20.0.1",
            "223.255.255.254",
            "2001:db9::1",
            "2001:db7:ffff::1",
            "2001:200::1",
            "3fff:1000::1",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(reason(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn refusal_messages_name_host_address_and_range() {
        let refused = TargetRefused {
            host: "internal.example".into(),
            ip: "10.0.0.5".parse().expect("ip"),
            reason: "private",
        };
        assert_eq!(
            refused.to_string(),
            "target host internal.example resolves to 10.0.0.5, a private address"
        );
        let literal = TargetRefused {
            host: "127.0.0.1".into(),
            ip: "127.0.0.1".parse().expect("ip"),
            reason: "loopback",
        };
        assert_eq!(
            literal.to_string(),
            "target 127.0.0.1 is a loopback address"
        );
    }
}
