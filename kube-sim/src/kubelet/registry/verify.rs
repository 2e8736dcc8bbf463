//! The server certificates an endpoint host trusts, as Go's `crypto/x509` (containerd's) decides: one
//! that chains to the system's roots or the host's `ca_file`, and one that `ca_file` holds itself, which
//! Go takes as its own chain (a certificate of the root pool) once it is within its validity period and
//! valid for the host's name.
//!
//! The second is what Docker's registry docs make (`openssl req -x509 … -addext subjectAltName=…`, which
//! OpenSSL 3 marks `CA:TRUE`): webpki alone refuses a CA certificate as a server's own
//! (`CaUsedAsEndEntity`) whatever the roots. A CA certificate that `ca_file` does not hold is refused as
//! Go refuses it, signed by an unknown authority. The handshake's signatures are checked by the crypto
//! provider either way, so only a server holding the certificate's key passes.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Verifies against `roots`, and accepts the certificates of `trusted` (the host's `ca_file`) as their
/// own chain.
pub(super) fn verifier(
    roots: RootCertStore,
    trusted: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
) -> Arc<Verifier> {
    // No roots at all (a `FROM scratch` node without `ca_file`): nothing chains.
    let chains = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .ok();
    Arc::new(Verifier {
        chains,
        trusted,
        provider,
    })
}

/// See the module's documentation.
#[derive(Debug)]
pub(super) struct Verifier {
    chains: Option<Arc<WebPkiServerVerifier>>,
    trusted: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
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
        let refused = match &self.chains {
            Some(chains) => match chains.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(verified) => return Ok(verified),
                Err(refused) => refused,
            },
            None => CertificateError::UnknownIssuer.into(),
        };
        if self
            .trusted
            .iter()
            .any(|t| t.as_ref() == end_entity.as_ref())
        {
            return own_chain(end_entity, server_name, now);
        }
        Err(as_go_refuses(refused))
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

/// A certificate of the trusted set as its own chain: valid now, and for `server_name`.
fn own_chain(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<ServerCertVerified, rustls::Error> {
    let (not_before, not_after) = validity(cert).ok_or(CertificateError::BadEncoding)?;
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
    let parsed = rustls::server::ParsedCertificate::try_from(cert)?;
    rustls::client::verify_server_name(&parsed, server_name)?;
    Ok(ServerCertVerified::assertion())
}

/// A CA certificate presented as the server's own, outside the trusted set, is one no root signed:
/// Go's `x509: certificate signed by unknown authority`.
fn as_go_refuses(refused: rustls::Error) -> rustls::Error {
    match &refused {
        rustls::Error::InvalidCertificate(CertificateError::Other(other))
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::CaUsedAsEndEntity)
            ) =>
        {
            CertificateError::UnknownIssuer.into()
        }
        _ => refused,
    }
}

/// `notBefore` and `notAfter` of a DER X.509 certificate (RFC 5280, 4.1).
fn validity(der: &[u8]) -> Option<(UnixTime, UnixTime)> {
    const SEQUENCE: u8 = 0x30;
    const VERSION: u8 = 0xa0;
    const INTEGER: u8 = 0x02;
    let (certificate, _) = der_element(der, SEQUENCE)?;
    let (tbs, _) = der_element(certificate, SEQUENCE)?;
    let mut fields = tbs;
    if let Some((_, rest)) = der_element(fields, VERSION) {
        fields = rest;
    }
    // serialNumber, signature, issuer.
    for tag in [INTEGER, SEQUENCE, SEQUENCE] {
        fields = der_element(fields, tag)?.1;
    }
    let (validity, _) = der_element(fields, SEQUENCE)?;
    let (not_before, rest) = der_time(validity)?;
    let (not_after, _) = der_time(rest)?;
    Some((not_before, not_after))
}

/// The contents of the element that starts `der` when it has `tag`, and the bytes after it.
fn der_element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let [first, length, rest @ ..] = der else {
        return None;
    };
    if *first != tag {
        return None;
    }
    let (length, rest) = match *length {
        short @ 0..0x80 => (usize::from(short), rest),
        long => {
            let count = usize::from(long & 0x7f);
            if !(1..=4).contains(&count) || rest.len() < count {
                return None;
            }
            let (octets, rest) = rest.split_at(count);
            let length = octets
                .iter()
                .fold(0usize, |sum, octet| (sum << 8) | usize::from(*octet));
            (length, rest)
        }
    };
    if rest.len() < length {
        return None;
    }
    Some(rest.split_at(length))
}

/// A `UTCTime` (`YYMMDDHHMMSSZ`, `YY` below 50 in the 2000s) or `GeneralizedTime` (`YYYYMMDDHHMMSSZ`)
/// that starts `der`, and the bytes after it.
fn der_time(der: &[u8]) -> Option<(UnixTime, &[u8])> {
    const UTC_TIME: u8 = 0x17;
    const GENERALIZED_TIME: u8 = 0x18;
    let tag = *der.first()?;
    let year_len = match tag {
        UTC_TIME => 2,
        GENERALIZED_TIME => 4,
        _ => return None,
    };
    let (text, rest) = der_element(der, tag)?;
    let digits = text.strip_suffix(b"Z")?;
    if digits.len() != year_len + 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let number = |from: usize, len: usize| {
        digits[from..from + len]
            .iter()
            .fold(0i16, |n, d| n * 10 + i16::from(d - b'0'))
    };
    let year = match (year_len, number(0, year_len)) {
        (2, yy) if yy < 50 => 2000 + yy,
        (2, yy) => 1900 + yy,
        (_, yyyy) => yyyy,
    };
    let field = |at: usize| i8::try_from(number(year_len + at, 2)).ok();
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    let at = jiff::civil::DateTime::new(year, month, day, hour, minute, second, 0).ok()?;
    let seconds = at
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()?
        .timestamp()
        .as_second();
    let since = std::time::Duration::from_secs(u64::try_from(seconds).ok()?);
    Some((UnixTime::since_unix_epoch(since), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `names`, marked a CA as OpenSSL 3's `req -x509` marks it.
    fn self_signed_ca(
        names: &[&str],
        from: (i32, u8, u8),
        to: (i32, u8, u8),
    ) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        params.self_signed(&key).unwrap().der().clone()
    }

    fn at(text: &str) -> UnixTime {
        let seconds = text.parse::<jiff::Timestamp>().unwrap().as_second();
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(seconds as u64))
    }

    fn verify(
        verifier: &Verifier,
        cert: &CertificateDer<'_>,
        name: &str,
        now: &str,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(cert, &[], &name, &[], at(now))
            .map(drop)
    }

    fn with_roots(certs: &[&CertificateDer<'static>]) -> Arc<Verifier> {
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots.add((*cert).clone()).unwrap();
        }
        let trusted = certs.iter().map(|c| (*c).clone()).collect();
        verifier(
            roots,
            trusted,
            Arc::new(rustls::crypto::ring::default_provider()),
        )
    }

    #[test]
    fn validity_reads_utc_and_generalized_times() {
        let cert = self_signed_ca(&["localhost"], (2024, 2, 3), (2050, 4, 5));
        let (from, to) = validity(&cert).unwrap();
        assert_eq!(from.as_secs(), at("2024-02-03T00:00:00Z").as_secs());
        assert_eq!(to.as_secs(), at("2050-04-05T00:00:00Z").as_secs());
        assert!(validity(&cert[..30]).is_none());
    }

    #[test]
    fn a_ca_file_certificate_is_its_own_chain_within_its_dates_and_names() {
        let cert = self_signed_ca(&["localhost", "127.0.0.1"], (2024, 1, 1), (2030, 1, 1));
        let verifier = with_roots(&[&cert]);
        for name in ["localhost", "127.0.0.1"] {
            verify(&verifier, &cert, name, "2026-01-01T00:00:00Z").unwrap();
        }
        let wrong = verify(&verifier, &cert, "registry.test", "2026-01-01T00:00:00Z").unwrap_err();
        assert!(
            matches!(
                &wrong,
                rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{wrong:?}"
        );
        let late = verify(&verifier, &cert, "localhost", "2031-01-01T00:00:00Z").unwrap_err();
        assert!(
            matches!(
                &late,
                rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
            ),
            "{late:?}"
        );
    }

    #[test]
    fn a_ca_certificate_outside_ca_file_is_of_an_unknown_authority() {
        let served = self_signed_ca(&["localhost"], (2024, 1, 1), (2030, 1, 1));
        let other = self_signed_ca(&["localhost"], (2024, 1, 1), (2030, 1, 1));
        let refused = verify(
            &with_roots(&[&other]),
            &served,
            "localhost",
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            refused.unwrap_err(),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
        let no_roots = verifier(
            RootCertStore::empty(),
            Vec::new(),
            Arc::new(rustls::crypto::ring::default_provider()),
        );
        let refused = verify(&no_roots, &served, "localhost", "2026-01-01T00:00:00Z");
        assert_eq!(
            refused.unwrap_err(),
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
    }
}
