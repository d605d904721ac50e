//! Client addresses, grouped the way one client usually holds them: the connection cap counts
//! an IPv4 address alone and an IPv6 address by its /64 (one host usually has a whole /64);
//! the sign-in throttle counts IPv4 by its /24 too, since rotating through the addresses of
//! one network is cheap. An IPv4 address mapped into IPv6 counts as the IPv4 address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The group `ip` counts in, an IPv4 address keeping its first `v4_bits` bits (at most 32)
/// and an IPv6 address its first 64.
pub(crate) fn group(ip: IpAddr, v4_bits: u32) -> IpAddr {
    let v4 = |v4: Ipv4Addr| {
        let mask = u32::MAX.checked_shl(32 - v4_bits.min(32)).unwrap_or(0);
        IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
    };
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(mapped) => v4(mapped),
            None => {
                let s = ip.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// The group as people read it in a log line: `192.0.2.0/24`, `2001:db8::/64`.
pub(crate) fn shown(group: IpAddr, v4_bits: u32) -> String {
    match group {
        IpAddr::V4(_) if v4_bits >= 32 => group.to_string(),
        IpAddr::V4(_) => format!("{group}/{v4_bits}"),
        IpAddr::V6(_) => format!("{group}/64"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn groups() {
        assert_eq!(group(ip("192.0.2.77"), 32), ip("192.0.2.77"));
        assert_eq!(group(ip("192.0.2.77"), 24), ip("192.0.2.0"));
        assert_eq!(group(ip("127.5.6.7"), 24), ip("127.5.6.0"));
        assert_eq!(group(ip("::ffff:192.0.2.77"), 24), ip("192.0.2.0"));
        assert_eq!(group(ip("2001:db8:1:2:3:4:5:6"), 24), ip("2001:db8:1:2::"));
        assert_eq!(group(ip("10.1.2.3"), 0), ip("0.0.0.0"));
        assert_eq!(shown(ip("192.0.2.0"), 24), "192.0.2.0/24");
        assert_eq!(shown(ip("192.0.2.7"), 32), "192.0.2.7");
        assert_eq!(shown(ip("2001:db8::"), 24), "2001:db8::/64");
    }
}
