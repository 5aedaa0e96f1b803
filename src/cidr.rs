//! Address ranges in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`), for the
//! settings that trust or admit clients by address (`trusted_proxies`,
//! a route's `allow_from`).
//! IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`) match the IPv4 ranges.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether the range is every address of its family (`0.0.0.0/0`,
    /// `::/0`).
    pub fn is_everything(&self) -> bool {
        self.prefix == 0
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `ADDRESS/PREFIX`, or a bare address (a single host).
    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix) = text.split_once('/').unwrap_or((text, ""));
        let network: IpAddr = address
            .parse()
            .map_err(|_| format!("{text:?} is not an address range like \"10.0.0.0/8\""))?;
        let network = network.to_canonical();
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = if prefix.is_empty() {
            bits
        } else {
            prefix
                .parse::<u8>()
                .ok()
                .filter(|prefix| *prefix <= bits)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {bits}"))?
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn matches_by_prefix_in_both_families() {
        assert!(cidr("10.0.0.0/8").contains(ip("10.200.3.4")));
        assert!(!cidr("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(cidr("192.168.1.7").contains(ip("192.168.1.7")));
        assert!(!cidr("192.168.1.7").contains(ip("192.168.1.8")));
        assert!(cidr("0.0.0.0/0").contains(ip("8.8.8.8")));
        assert!(cidr("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!cidr("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(cidr("::/0").contains(ip("::1")));
        assert!(
            cidr("127.0.0.0/8").contains(ip("::ffff:127.0.0.1")),
            "an IPv4-mapped peer matches IPv4 ranges"
        );
        assert!(!cidr("10.0.0.0/8").contains(ip("2001:db8::1")));
    }

    #[test]
    fn rejects_what_is_not_a_range() {
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "example.com",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert_eq!(cidr("10.1.0.0/16").to_string(), "10.1.0.0/16");
    }
}
