//! What the registry client trusts over TLS: what the platform's verifier
//! trusts (the system's roots) and the CA certificates of
//! `registry.caFile`; and a server certificate that is, byte for byte, one
//! of the certificates `registry.caFile` holds, while it is valid for the
//! registry's name and within its validity period, as curl, Docker and
//! containerd trust it.
//!
//! The second case is Docker's own recipe for a registry certificate
//! (`openssl req -x509 … -addext subjectAltName=…`), which OpenSSL 3 marks
//! `CA:TRUE`: webpki refuses a CA certificate as a server's own
//! (`CaUsedAsEndEntity`) whatever the roots are. The handshake's
//! signatures are checked by the crypto provider either way, so only a
//! server holding that certificate's key passes.
//!
//! A refusal is worded by its cause ([`refusal`]).

use std::{
    path::Path,
    sync::{Arc, OnceLock},
    time::{Duration, SystemTime},
};

use rustls::{
    CertificateError, DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime},
};

/// The rustls configuration of a registry client that trusts `trusted`
/// (the certificates of `registry.caFile`) besides the system's roots.
pub fn client_config(
    trusted: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    crate::install_crypto_provider();
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let verifier = Verifier {
        provider: provider.clone(),
        trusted,
        platform: OnceLock::new(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The platform's verifier with `trusted` as extra roots, and `trusted`
/// themselves as server certificates.
#[derive(Debug)]
struct Verifier {
    provider: Arc<CryptoProvider>,
    trusted: Vec<CertificateDer<'static>>,
    /// Made on the first handshake: it reads the system's roots, which a
    /// client of a plain-HTTP registry never needs.
    platform: OnceLock<Result<rustls_platform_verifier::Verifier, rustls::Error>>,
}

impl Verifier {
    fn platform(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        let made = self.platform.get_or_init(|| {
            let provider = self.provider.clone();
            if self.trusted.is_empty() {
                rustls_platform_verifier::Verifier::new(provider)
            } else {
                rustls_platform_verifier::Verifier::new_with_extra_roots(
                    self.trusted.iter().cloned(),
                    provider,
                )
            }
        });
        made.as_ref().map_err(Clone::clone)
    }

    /// `end_entity` is one of the trusted certificates: it stands for
    /// itself, if it is valid now and for `server_name`.
    fn verify_trusted(
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let (not_before, not_after) = validity(end_entity).ok_or(CertificateError::BadEncoding)?;
        if now.as_secs() < not_before.as_secs() {
            return Err(CertificateError::NotValidYetContext {
                time: now,
                not_before,
            }
            .into());
        }
        if now.as_secs() > not_after.as_secs() {
            return Err(CertificateError::ExpiredContext {
                time: now,
                not_after,
            }
            .into());
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.platform() {
            Ok(platform) => match platform.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(verified) => return Ok(verified),
                Err(refused) => refused,
            },
            Err(unusable) => unusable,
        };
        if self
            .trusted
            .iter()
            .any(|t| t.as_ref() == end_entity.as_ref())
        {
            Verifier::verify_trusted(end_entity, server_name, now)
        } else {
            Err(refused)
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `notBefore` and `notAfter` of a DER certificate.
fn validity(der: &[u8]) -> Option<(UnixTime, UnixTime)> {
    const SEQUENCE: u8 = 0x30;
    let (certificate, _) = element(der, SEQUENCE)?;
    let (tbs, _) = element(certificate, SEQUENCE)?;
    let mut rest = tbs;
    // The version is explicitly tagged [0]; it is absent for v1.
    if let Some((_, after)) = element(rest, 0xa0) {
        rest = after;
    }
    // The serial number, the signature algorithm and the issuer.
    for tag in [0x02, SEQUENCE, SEQUENCE] {
        rest = element(rest, tag)?.1;
    }
    let (validity, _) = element(rest, SEQUENCE)?;
    let (not_before, rest) = time(validity)?;
    let (not_after, _) = time(rest)?;
    Some((not_before, not_after))
}

/// The contents of the DER element at the start of `der` when its tag is
/// `tag`, and what follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&length, rest) = rest.split_first()?;
    let (length, rest) = if length < 0x80 {
        (usize::from(length), rest)
    } else {
        let octets = usize::from(length & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (octets, rest) = rest.split_at(octets);
        let length = octets
            .iter()
            .fold(0usize, |n, &octet| (n << 8) | usize::from(octet));
        (length, rest)
    };
    (rest.len() >= length).then(|| rest.split_at(length))
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`, years from 1950) or `GeneralizedTime`
/// (`YYYYMMDDHHMMSSZ`) at the start of `der`, and what follows it.
fn time(der: &[u8]) -> Option<(UnixTime, &[u8])> {
    let (tag, year_digits) = match der.first()? {
        0x17 => (0x17, 2),
        0x18 => (0x18, 4),
        _ => return None,
    };
    let (text, rest) = element(der, tag)?;
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if text.len() != year_digits + 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, fields) = text.split_at(year_digits);
    let year: u32 = year.parse().ok()?;
    let year = match year_digits {
        2 if year < 50 => 2000 + year,
        2 => 1900 + year,
        _ => year,
    };
    let field = |at: usize| &fields[at..at + 2];
    let rfc3339 = format!(
        "{year:04}-{}-{}T{}:{}:{}Z",
        field(0),
        field(2),
        field(4),
        field(6),
        field(8)
    );
    let at = humantime::parse_rfc3339(&rfc3339).ok()?;
    let since = at.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some((UnixTime::since_unix_epoch(since), rest))
}

/// The `rustls::Error` a failed request carries somewhere in its chain.
pub fn tls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    // An `io::Error` hands on the source of what it wraps, never what it
    // wraps (another `io::Error`, in reqwest's connector): look inside.
    let wrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| tls_error(inner));
    wrapped.or_else(|| error.source().and_then(tls_error))
}

/// Why the certificate of the registry at `host` was refused, and what to
/// do, for `registry.caFile` set to `ca_file` or unset.
pub fn refusal(error: &rustls::Error, host: &str, ca_file: Option<&Path>) -> String {
    let rustls::Error::InvalidCertificate(error) = error else {
        return format!("the TLS handshake failed ({error})");
    };
    let in_ca_file = |path: &Path| format!("`registry.caFile` ({})", path.display());
    match error {
        // A signature that does not verify: an issuer of the same name,
        // but not the one trusted.
        CertificateError::UnknownIssuer | CertificateError::BadSignature => match ca_file {
            Some(path) => format!(
                "it is not signed by a CA in {} nor by one of the system's roots; point `registry.caFile` at the CA certificate that signed it",
                in_ca_file(path)
            ),
            None => String::from(
                "it is not signed by a CA this machine trusts; set `registry.caFile` to the CA certificate that signed it",
            ),
        },
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => format!(
            "it is not valid for the name {} ({}); name the registry as its certificate does, or give it a certificate for {}",
            expected.to_str(),
            match presented.as_slice() {
                [] => String::from("it names no host"),
                names => {
                    let names: Vec<&str> = names.iter().map(|n| presented_name(n)).collect();
                    format!("it is valid for {}", names.join(", "))
                }
            },
            expected.to_str()
        ),
        CertificateError::NotValidForName => {
            format!("it is not valid for the name {}", host_name(host))
        }
        CertificateError::ExpiredContext { not_after, .. } => {
            format!("it expired on {}", rfc3339(not_after))
        }
        CertificateError::NotValidYetContext { not_before, .. } => {
            format!("it is not valid before {}", rfc3339(not_before))
        }
        CertificateError::Expired | CertificateError::NotValidYet => {
            String::from("it is outside its validity period")
        }
        CertificateError::Other(other)
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            match ca_file {
                Some(path) => format!(
                    "it is a CA certificate, which is trusted as the registry's own only when {} holds that very certificate, and it does not; put the registry's certificate in it",
                    in_ca_file(path)
                ),
                None => String::from(
                    "it is a self-signed CA certificate; set `registry.caFile` to that certificate",
                ),
            }
        }
        other => format!("it was refused ({other:?})"),
    }
}

/// A name webpki presents (`DnsName("reg.lan")`, `IpAddress(10.0.0.1)`)
/// as a certificate gives it (`reg.lan`, `10.0.0.1`).
fn presented_name(presented: &str) -> &str {
    let inner = |prefix: &str, suffix: &str| {
        presented
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
    };
    inner("DnsName(\"", "\")")
        .or_else(|| inner("IpAddress(", ")"))
        .unwrap_or(presented)
}

/// `host` of `host:port` or `[v6]:port`.
fn host_name(host: &str) -> &str {
    match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    }
}

fn rfc3339(time: &UnixTime) -> String {
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(time.as_secs());
    humantime::format_rfc3339_seconds(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(
        names: &[&str],
        ca: bool,
        not_before: (i32, u8, u8),
        not_after: (i32, u8, u8),
    ) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn at(rfc3339: &str) -> UnixTime {
        let at = humantime::parse_rfc3339(rfc3339).unwrap();
        UnixTime::since_unix_epoch(at.duration_since(SystemTime::UNIX_EPOCH).unwrap())
    }

    #[test]
    fn validity_is_read_from_utc_and_generalized_times() {
        // rcgen writes UTCTime up to 2049 and GeneralizedTime after.
        let cert = certificate(&["localhost"], true, (2024, 1, 2), (2051, 3, 4));
        let (not_before, not_after) = validity(&cert).unwrap();
        assert_eq!(not_before.as_secs(), at("2024-01-02T00:00:00Z").as_secs());
        assert_eq!(not_after.as_secs(), at("2051-03-04T00:00:00Z").as_secs());
        assert_eq!(validity(&cert[..40]), None, "cut short");
    }

    #[test]
    fn a_trusted_certificate_stands_for_itself_while_valid_for_the_name() {
        let cert = certificate(
            &["localhost", "127.0.0.1"],
            true,
            (2024, 1, 1),
            (2030, 1, 1),
        );
        let name = |n: &str| ServerName::try_from(n.to_string()).unwrap();
        let now = at("2026-06-01T00:00:00Z");
        for host in ["localhost", "127.0.0.1"] {
            assert!(Verifier::verify_trusted(&cert, &name(host), now).is_ok());
        }
        let other = Verifier::verify_trusted(&cert, &name("reg.lan"), now).unwrap_err();
        let said = refusal(&other, "reg.lan:5000", Some(Path::new("ca.pem")));
        assert!(
            said.starts_with("it is not valid for the name reg.lan (it is valid for"),
            "{said}"
        );
        let later = at("2031-01-01T00:00:00Z");
        let expired = Verifier::verify_trusted(&cert, &name("localhost"), later).unwrap_err();
        let said = refusal(&expired, "localhost:5000", Some(Path::new("ca.pem")));
        assert_eq!(said, "it expired on 2030-01-01T00:00:00Z");
        let earlier = at("2023-01-01T00:00:00Z");
        let early = Verifier::verify_trusted(&cert, &name("localhost"), earlier).unwrap_err();
        let said = refusal(&early, "localhost:5000", None);
        assert_eq!(said, "it is not valid before 2024-01-01T00:00:00Z");
    }

    #[test]
    fn refusals_say_their_cause_and_mention_ca_file_as_set_or_not() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let with = refusal(&unknown, "reg.lan:5000", Some(Path::new("/certs/ca.pem")));
        assert!(
            with.contains("not signed by a CA in `registry.caFile` (/certs/ca.pem)"),
            "{with}"
        );
        let without = refusal(&unknown, "reg.lan:5000", None);
        assert!(without.contains("set `registry.caFile`"), "{without}");
        let ca = rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
            Arc::new(webpki::Error::CaUsedAsEndEntity),
        )));
        let said = refusal(&ca, "reg.lan:5000", Some(Path::new("/certs/ca.pem")));
        assert!(said.contains("does not"), "{said}");
    }
}
