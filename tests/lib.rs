//! Shared fixtures for the integration tests in `it/`.

use std::path::{Path, PathBuf};

pub mod secure_registry;

/// A reporter that prints every event on stderr, where the test harness
/// shows it for a failing test.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl dev_env::report::Reporter for Stderr {
    fn report(&self, event: &dev_env::report::Event) {
        eprintln!("{event}");
    }
}

/// A reporter that keeps every event's line, for tests that assert what
/// a command said.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    pub lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl dev_env::report::Reporter for Recorder {
    fn report(&self, event: &dev_env::report::Event) {
        self.lines
            .lock()
            .expect("recorder lock")
            .push(event.to_string());
    }
}

/// A runtime for the library's async calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// `dev up` as a plain run does it: nothing recreated, two minutes for the
/// components to converge.
pub const UP: dev_env::lifecycle::UpOptions = dev_env::lifecycle::UpOptions {
    recreate: false,
    verbose: false,
    timeout: std::time::Duration::from_secs(120),
    prune: dev_env::apply::Prune::DECLARED,
};

/// `dev up` of `config` with [`UP`], its events on stderr.
pub fn up(
    config: &dev_env::config::Config,
) -> Result<dev_env::lifecycle::UpReport, dev_env::lifecycle::Error> {
    runtime().block_on(dev_env::lifecycle::up(config, UP, &Stderr))
}

/// Pushes a tiny one-layer image to `host` as `<repo>:dev`; returns its
/// manifest's digest and the digest the registry stated on the push.
pub async fn push_tiny(host: &str, repo: &str) -> (String, Option<String>) {
    let client = dev_env::image::distribution::Client::new(host);
    let tiny = dev_env::image::oci::binary_image(
        "tiny",
        b"tiny".to_vec(),
        &dev_env::platform::Platform::linux(std::env::consts::ARCH),
    );
    for blob in tiny.blobs() {
        client
            .upload_blob(repo, &blob.digest, blob.bytes.clone())
            .await
            .expect("the registry takes the blob");
    }
    let stated = client
        .put_manifest(
            repo,
            dev_env::image::DEV_TAG,
            tiny.manifest.media_type,
            tiny.manifest.bytes.clone(),
        )
        .await
        .expect("the registry takes the manifest");
    (tiny.manifest.digest, stated)
}

/// How `components` of `config` are built for a cluster of this
/// machine's platform (the engine runs here).
pub fn builds_here(
    config: &dev_env::config::Config,
    components: &[String],
) -> dev_env::image::builds::Builds {
    let here = dev_env::platform::Platform::linux(std::env::consts::ARCH);
    dev_env::image::builds::plan(config, components, &here).expect("this machine builds for itself")
}

/// Push options that show nothing, for `builds`.
pub fn quiet(builds: &dev_env::image::builds::Builds) -> dev_env::image::PushOptions<'_> {
    dev_env::image::PushOptions {
        output: None,
        progress: None,
        cancel: None,
        builds,
    }
}

/// Pulls `reference` into the engine.
pub fn pull(reference: &str) {
    let sh = xshell::Shell::new().expect("a shell");
    xshell::cmd!(sh, "docker pull -q {reference}")
        .quiet()
        .ignore_stdout()
        .run()
        .expect("the engine pulls the image");
}

/// `os/architecture` of the image `reference` in the engine, as the
/// engine reads its config.
pub fn image_platform(reference: &str) -> String {
    let sh = xshell::Shell::new().expect("a shell");
    let format = "{{.Os}}/{{.Architecture}}";
    xshell::cmd!(sh, "docker image inspect --format {format} {reference}")
        .read()
        .expect("the engine has the image")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives below the root")
        .to_path_buf()
}

/// Where Debian's `docker-registry` package installs the distribution registry.
pub const DISTRIBUTION_BINARY: &str = "/usr/bin/docker-registry";

/// YAML added to a test registry's configuration.
#[derive(Debug, Default)]
pub struct RegistrySettings {
    /// Lines under `http:`, indented by two spaces (`  tls: …`).
    pub http: String,
    /// Top-level sections (`auth: …`).
    pub top: String,
}

/// A distribution registry (`docker-registry serve`) on a free loopback
/// port, storing into a temporary directory. Killed and deleted on drop.
pub struct DistributionRegistry {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl DistributionRegistry {
    /// Starts a registry and waits until it accepts connections. Panics with
    /// the fix when the binary is missing: tests that need it must fail.
    pub fn start() -> DistributionRegistry {
        DistributionRegistry::start_with(&RegistrySettings::default())
    }

    /// [`DistributionRegistry::start`] with `settings` in its configuration.
    pub fn start_with(settings: &RegistrySettings) -> DistributionRegistry {
        assert!(
            Path::new(DISTRIBUTION_BINARY).exists(),
            "{DISTRIBUTION_BINARY} is missing; install it with `apt-get install -y docker-registry`"
        );
        let mut last = String::new();
        // A free port can be taken between picking and binding: try again.
        for _ in 0..5 {
            match DistributionRegistry::try_start(settings) {
                Ok(registry) => return registry,
                Err(e) => last = e,
            }
        }
        panic!("the distribution registry did not start: {last}");
    }

    fn try_start(settings: &RegistrySettings) -> Result<DistributionRegistry, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = free_port();
        let config = dir.path().join("config.yml");
        let data = dir.path().join("data");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{}{}",
                data.display(),
                settings.http,
                settings.top,
            ),
        )
        .map_err(|e| e.to_string())?;
        let log =
            std::fs::File::create(dir.path().join("registry.log")).map_err(|e| e.to_string())?;
        let sh = xshell::Shell::new().map_err(|e| e.to_string())?;
        let mut command: std::process::Command =
            xshell::cmd!(sh, "{DISTRIBUTION_BINARY} serve {config}").into();
        command
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        let child = command.spawn().map_err(|e| e.to_string())?;
        let mut registry = DistributionRegistry { child, port, dir };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = registry.child.try_wait() {
                return Err(format!("it exited with {status}: {}", registry.log()));
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(registry);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Err(format!(
            "port {port} did not open within 15s: {}",
            registry.log()
        ))
    }

    /// `127.0.0.1:<port>`, as `registry.external` names it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What the registry logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Stops the registry now; the drop that follows does nothing more.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DistributionRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `imageID`s of the Ready, non-terminating pods `selector` picks in
/// `namespace`, through kubectl. Old pods may still be terminating when a
/// push returns: they get no traffic and are not counted.
pub fn serving_image_ids(kubeconfig: &Path, namespace: &str, selector: &str) -> Vec<String> {
    let sh = xshell::Shell::new().expect("a shell");
    let path = "jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.status.containerStatuses[0].ready}={.status.containerStatuses[0].imageID} {end}";
    let out = xshell::cmd!(
        sh,
        "kubectl --kubeconfig {kubeconfig} -n {namespace} get pods -l {selector} -o {path}"
    )
    .read()
    .expect("kubectl get pods");
    out.split_whitespace()
        .filter_map(|p| p.strip_prefix("|true="))
        .map(str::to_string)
        .collect()
}

/// A port on 127.0.0.1 with nothing listening on it right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A name no other test run uses: `<prefix>-<pid>-<n>`, lower case.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A /24 under 10.200.0.0/13 picked at random, so environments of
/// different tests do not meet on one subnet.
pub fn random_subnet() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("10.{}.{}.0/24", 200 + nanos % 50, (nanos / 50) % 250)
}

/// Panics with the fix unless the Docker engine answers: tests that need it
/// must fail, not skip.
pub fn require_docker() {
    let sh = xshell::Shell::new().expect("a shell");
    let answer = xshell::cmd!(sh, "docker version")
        .quiet()
        .ignore_stdout()
        .ignore_stderr()
        .run();
    assert!(
        answer.is_ok(),
        "the Docker engine is not reachable; start Docker (these tests need the real engine)"
    );
}

/// Docker objects a test created, removed when it ends however it ends.
#[derive(Default)]
pub struct DockerCleanup {
    pub containers: Vec<String>,
    pub images: Vec<String>,
    pub volumes: Vec<String>,
    pub networks: Vec<String>,
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let Ok(sh) = xshell::Shell::new() else { return };
        let run = |cmd: xshell::Cmd<'_>| {
            let _ = cmd
                .quiet()
                .ignore_status()
                .ignore_stdout()
                .ignore_stderr()
                .run();
        };
        for name in &self.containers {
            run(xshell::cmd!(sh, "docker rm -f -v {name}"));
        }
        for name in &self.images {
            run(xshell::cmd!(sh, "docker rmi -f {name}"));
        }
        for name in &self.volumes {
            run(xshell::cmd!(sh, "docker volume rm -f {name}"));
        }
        for name in &self.networks {
            run(xshell::cmd!(sh, "docker network rm {name}"));
        }
    }
}

/// A throwaway Cargo workspace with one binary crate `hello`, a Dockerfile
/// context `static/`, a `manifests/` directory and a `dev-env.yaml` whose
/// registry is `registry_host` (as `registry.external`).
pub struct Project {
    pub dir: tempfile::TempDir,
    pub name: String,
}

impl Project {
    /// Components: `hello` (cargo backend, image `<name>/hello`) and
    /// `static` (docker backend, image `<name>/static`, two `COPY` layers).
    pub fn new(registry_host: &str) -> Project {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let name = unique_name("it");
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "Cargo.toml",
            "[workspace]\nresolver = \"3\"\nmembers = [\"hello\"]\n",
        );
        write(
            "hello/Cargo.toml",
            "[package]\nname = \"hello\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        );
        write(
            "hello/src/main.rs",
            "fn main() {\n    println!(\"hello, one\");\n}\n",
        );
        write(
            "static/Dockerfile",
            "FROM scratch\nCOPY a.txt /a.txt\nCOPY b.txt /b.txt\n",
        );
        write("static/a.txt", "a: first layer\n");
        write("static/b.txt", "b: second layer\n");
        write("static/ignored.txt", "left out by .dockerignore\n");
        write("static/.dockerignore", "ignored.txt\n");
        std::fs::create_dir_all(root.join("manifests")).unwrap();
        let project = Project { dir, name };
        project.write_config(registry_host);
        project
    }

    /// Rewrites `dev-env.yaml` with `registry_host` as the external registry.
    pub fn write_config(&self, registry_host: &str) {
        let name = &self.name;
        let text = format!(
            r#"name: {name}
registry: {{external: '{registry_host}'}}
manifests: [manifests]
components:
  hello:
    image: {name}/hello
    build: {{cargo: {{package: hello, bin: hello}}}}
    rollout: {{kind: Deployment, namespace: it, name: hello, container: hello}}
  static:
    image: {name}/static
    build: {{docker: {{context: static, dockerfile: Dockerfile}}}}
    rollout: {{kind: Deployment, namespace: it, name: static, container: static}}
"#
        );
        std::fs::write(self.config_path(), text).unwrap();
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("dev-env.yaml")
    }

    /// Replaces the contents of `path`, relative to the project root.
    pub fn edit(&self, path: &str, text: &str) {
        std::fs::write(self.dir.path().join(path), text).unwrap();
    }
}

/// A project directory `target/it/<name>/` inside the repository, so the
/// sim provider finds the `kube-sim` package above it, with a subnet of its
/// own and every Docker object of environment `<name>` removed at the end.
pub struct SimProject {
    pub dir: PathBuf,
    pub name: String,
    pub subnet: String,
    _cleanup: DockerCleanup,
}

impl SimProject {
    pub fn new(prefix: &str) -> SimProject {
        require_docker();
        let name = unique_name(prefix);
        let dir = repo_root().join("target/it").join(&name);
        std::fs::create_dir_all(&dir).expect("a project directory");
        let subnet = random_subnet();
        let mut cleanup = DockerCleanup::default();
        cleanup.containers = vec![format!("{name}-server-0"), format!("{name}-registry")];
        cleanup.volumes = vec![format!("{name}-registry-data")];
        cleanup.networks = vec![name.clone()];
        SimProject {
            dir,
            name,
            subnet,
            _cleanup: cleanup,
        }
    }

    /// Writes a `dev-env.yaml` of the sim provider with the manifests under
    /// `manifests/` and no component.
    pub fn write_sim_config(&self) {
        self.write(
            "dev-env.yaml",
            &format!(
                "name: {}\nnetwork: {{ipv4Subnet: {}}}\ncluster: {{provider: sim}}\nmanifests: [manifests]\n",
                self.name, self.subnet
            ),
        );
    }

    /// Writes `manifests/app.yaml`: a namespace `app` and a ConfigMap
    /// `settings` in it whose `data.mode` is `mode`.
    pub fn write_config_map(&self, mode: &str) {
        self.write(
            "manifests/app.yaml",
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: app}}\n---\n\
                 apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: app}}\ndata: {{mode: {mode}}}\n"
            ),
        );
    }

    /// A sim environment whose manifests are a namespace `app` and a
    /// ConfigMap `settings` in it.
    pub fn with_config_map(prefix: &str) -> SimProject {
        let env = SimProject::new(prefix);
        env.write_config_map("dev");
        env.write_sim_config();
        env
    }

    /// A sim environment with one component `app`: a cargo workspace whose
    /// binary idles, run by Deployment `app/app`.
    pub fn with_component(prefix: &str) -> SimProject {
        let env = SimProject::new(prefix);
        env.write(
            "Cargo.toml",
            "[workspace]\nmembers = [\"app\"]\nresolver = \"3\"\n",
        );
        env.write(
            "app/Cargo.toml",
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n",
        );
        env.write(
            "app/src/main.rs",
            "fn main() {\n    std::thread::sleep(std::time::Duration::from_secs(86400));\n}\n",
        );
        let name = env.name.clone();
        env.write(
            "dev-env.yaml",
            &format!(
                "name: {name}\nnetwork: {{ipv4Subnet: {}}}\ncluster: {{provider: sim}}\nmanifests: [manifests]\n\
                 components:\n  app:\n    image: {name}/app\n    build: {{cargo: {{package: app}}}}\n    \
                 rollout: {{kind: Deployment, namespace: app, name: app, container: app}}\n",
                env.subnet
            ),
        );
        env.write(
            "manifests/app.yaml",
            &format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: app}}\n---\n\
                 apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: app, namespace: app}}\nspec:\n  replicas: 1\n  \
                 selector: {{matchLabels: {{app: app}}}}\n  template:\n    metadata: {{labels: {{app: app}}}}\n    \
                 spec: {{terminationGracePeriodSeconds: 1, containers: [{{name: app, image: 'registry:5000/{name}/app:dev'}}]}}\n"
            ),
        );
        env
    }

    /// Writes `text` to `path` below the project, creating directories.
    pub fn write(&self, path: &str, text: &str) {
        let path = self.dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
        std::fs::write(path, text).expect("a written file");
    }

    /// The project's `dev-env.yaml`, loaded.
    pub fn config(&self) -> dev_env::config::Config {
        dev_env::config::Config::load(&self.dir.join("dev-env.yaml")).expect("a valid dev-env.yaml")
    }
}

impl Drop for SimProject {
    fn drop(&mut self) {
        // Pod containers of the environment, however the test ended; the
        // node, registry and network follow with the cleanup guard.
        if let Ok(sh) = xshell::Shell::new() {
            let filter = format!("label=dev-env.name={}", self.name);
            let ids = xshell::cmd!(sh, "docker ps -aq --filter {filter}")
                .quiet()
                .read()
                .unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = xshell::cmd!(sh, "docker rm -f {id}")
                    .quiet()
                    .ignore_stdout()
                    .ignore_stderr()
                    .run();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
