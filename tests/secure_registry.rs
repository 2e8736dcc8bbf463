//! A distribution registry that wants TLS and credentials: Debian's
//! registry with a certificate signed by a CA the test makes and an
//! htpasswd file, and the Docker client configurations `docker login`
//! would write for it.

use std::path::PathBuf;

use base64::Engine;

use crate::{DistributionRegistry, RegistrySettings};

pub const USER: &str = "ci";
pub const PASSWORD: &str = "s3cret-pw";

/// A registry on 127.0.0.1 with TLS and htpasswd auth, and the files it
/// was made from.
pub struct SecureRegistry {
    registry: DistributionRegistry,
    dir: tempfile::TempDir,
}

impl SecureRegistry {
    pub fn start() -> SecureRegistry {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path();
        let (ca, cert, key) = certificates();
        std::fs::write(files.join("ca.pem"), ca).unwrap();
        std::fs::write(files.join("cert.pem"), cert).unwrap();
        std::fs::write(files.join("key.pem"), key).unwrap();
        SecureRegistry::serve(dir)
    }

    /// A registry whose certificate is made as Docker's registry docs make
    /// it, `openssl req -x509` with `subjectAltName = <san>` (OpenSSL 3
    /// marks it `CA:TRUE`); [`SecureRegistry::ca`] is that certificate.
    pub fn start_openssl(san: &str) -> SecureRegistry {
        let dir = tempfile::tempdir().unwrap();
        openssl_certificate(dir.path(), san);
        std::fs::copy(dir.path().join("cert.pem"), dir.path().join("ca.pem")).unwrap();
        SecureRegistry::serve(dir)
    }

    /// Serves `cert.pem` and `key.pem` of `dir`, with an htpasswd file
    /// there for [`USER`].
    fn serve(dir: tempfile::TempDir) -> SecureRegistry {
        let files = dir.path();
        let hash = bcrypt::hash(PASSWORD, 5).unwrap();
        std::fs::write(files.join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
        let settings = RegistrySettings {
            http: format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                files.join("cert.pem").display(),
                files.join("key.pem").display()
            ),
            top: format!(
                "auth:\n  htpasswd:\n    realm: dev-env-test\n    path: {}\n",
                files.join("htpasswd").display()
            ),
        };
        let registry = DistributionRegistry::start_with(&settings);
        SecureRegistry { registry, dir }
    }

    pub fn host(&self) -> String {
        self.registry.host()
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// `cert.pem` and `key.pem` in `dir`, by the recipe of Docker's registry
/// docs ("Run an externally-accessible registry"): a self-signed RSA 4096
/// certificate for a year, the names in `san`
/// (`DNS:localhost,IP:127.0.0.1`).
pub fn openssl_certificate(dir: &std::path::Path, san: &str) {
    let sh = xshell::Shell::new().unwrap();
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let extension = format!("subjectAltName = {san}");
    xshell::cmd!(
        sh,
        "openssl req -newkey rsa:4096 -nodes -sha256 -keyout {key} -addext {extension} -x509 -days 365 -out {cert} -subj /CN=dev-env-test"
    )
    .quiet()
    .ignore_stderr()
    .run()
    .expect("openssl makes the certificate (is the openssl CLI installed?)");
}

/// A CA, and a certificate it signed for 127.0.0.1 and localhost, as PEM:
/// (CA certificate, certificate, key).
pub fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "dev-env test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(vec![String::from("127.0.0.1"), String::from("localhost")]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// A Docker client configuration directory holding `config`.
pub fn docker_config(config: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

pub fn auths(host: &str, user: &str, password: &str) -> serde_json::Value {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    serde_json::json!({"auths": {host: {"auth": auth}}})
}

/// A credential helper script on PATH that gives `USER`/`PASSWORD` for
/// `host`; removed on drop.
pub struct CredentialHelper {
    pub name: String,
    path: PathBuf,
}

impl CredentialHelper {
    pub fn install(host: &str) -> CredentialHelper {
        use std::os::unix::fs::PermissionsExt;
        let name = crate::unique_name("devenvit");
        let path = PathBuf::from(format!("/usr/local/bin/docker-credential-{name}"));
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\nif [ \"$server\" = '{host}' ]; then\n  printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$server\"\nelse\n  echo 'credentials not found in native keychain'; exit 1\nfi\n"
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        CredentialHelper { name, path }
    }
}

impl Drop for CredentialHelper {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
