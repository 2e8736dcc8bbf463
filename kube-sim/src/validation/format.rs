//! The string formats a custom resource schema may declare and the API server checks. Formats it does not
//! know are accepted as they are.

use base64::Engine as _;

/// Whether a string has a format.
pub fn valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => uuid(s),
        "hostname" => hostname(s),
        "email" => email(s),
        "mac" => mac(s),
        "duration" => duration(s),
        "hexcolor" => {
            s.len() == 7 && s.starts_with('#') && s[1..].chars().all(|c| c.is_ascii_hexdigit())
        }
        _ => true,
    }
}

fn cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn email(s: &str) -> bool {
    match s.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && hostname(domain),
        None => false,
    }
}

fn mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A Go duration (`1h30m`, `500ms`) or a number with a unit word (`3 days`), as the API server accepts.
fn duration(s: &str) -> bool {
    let re = regex::Regex::new(
        r"^([+-]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w))+$|^\d+\s*(ns|us|ms|s|m|h|d|w|seconds?|minutes?|hours?|days?|weeks?)$",
    );
    s == "0" || re.is_ok_and(|re| re.is_match(s))
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats() {
        assert!(valid("date-time", "2024-01-02T03:04:05Z"));
        assert!(!valid("date-time", "yesterday"));
        assert!(valid("date", "2024-01-02"));
        assert!(!valid("date", "2024-13-02"));
        assert!(valid("ipv4", "10.0.0.1") && !valid("ipv4", "10.0.0"));
        assert!(valid("cidr", "10.0.0.0/8") && !valid("cidr", "10.0.0.0/33"));
        assert!(valid("uuid", "123e4567-e89b-12d3-a456-426614174000") && !valid("uuid", "x"));
        assert!(valid("byte", "aGk=") && !valid("byte", "%%"));
        assert!(valid("duration", "1h30m") && !valid("duration", "soon"));
        assert!(valid("int-or-something-unknown", "anything"));
    }
}
