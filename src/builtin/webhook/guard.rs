//! The SSRF guard: webhook targets that resolve to loopback, private, link-local,
//! unspecified and other non-public addresses are refused unless allowed.
//!
//! The check runs inside ureq's name resolution ([`GuardedResolver`]), on every address the
//! name resolves to, and the connection goes to the addresses that were checked. Checking
//! the name first and connecting after a second lookup would let DNS rebinding (a name
//! that answers a public address, then a private one) slip through.

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
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return forbidden_v4(v4);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return forbidden_v4(Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])));
    }
    if s[0] == 0x2002 {
        return forbidden_v4(Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2])));
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local",
        x if x & 0xffc0 == 0xfec0 => "site-local",
        x if x & 0xff00 == 0xff00 => "multicast",
        // ::/96 without the loopback and unspecified: the old IPv4-compatible form.
        0 if s[1..6] == [0; 5] => "IPv4-compatible (deprecated)",
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
            ("::7f00:1", "IPv4-compatible (deprecated)"),
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
