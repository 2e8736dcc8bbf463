//! The certificate authority and serving certificate, generated fresh at every start.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Certificates could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen failed.
    #[error("generating certificates")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("configuring TLS")]
    Rustls(#[from] rustls::Error),
}

/// A CA and a serving certificate signed by it.
pub struct Certificates {
    /// The CA certificate in PEM, for `certificate-authority-data`.
    pub ca_pem: String,
    /// The serving certificate chain (leaf, then CA).
    pub chain: Vec<CertificateDer<'static>>,
    /// The serving key (PKCS#8).
    pub key: PrivatePkcs8KeyDer<'static>,
}

/// The names every serving certificate carries, like k3s: loopback, `localhost` and the in-cluster names.
pub const DEFAULT_SANS: &[&str] = &[
    "localhost",
    "127.0.0.1",
    "::1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.43.0.1",
];

/// Generates a CA and a serving certificate for the default names plus `extra_sans`.
pub fn generate(extra_sans: &[String]) -> Result<Certificates, Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kube-sim-server-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut sans: Vec<String> = DEFAULT_SANS.iter().map(|s| s.to_string()).collect();
    for s in extra_sans {
        if !sans.contains(s) {
            sans.push(s.clone());
        }
    }
    let leaf_key = KeyPair::generate()?;
    let mut leaf_params = CertificateParams::new(sans)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf_params.use_authority_key_identifier_extension = true;
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    Ok(Certificates {
        ca_pem: ca_cert.pem(),
        chain: vec![leaf.der().clone(), ca_cert.der().clone()],
        key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
    })
}

/// A rustls server configuration on the `ring` provider, offering HTTP/2 and HTTP/1.1 (which upgrades
/// to exec, attach and port-forward streams need).
pub fn server_config(certs: &Certificates) -> Result<Arc<rustls::ServerConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            certs.chain.clone(),
            PrivateKeyDer::Pkcs8(certs.key.clone_key()),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
