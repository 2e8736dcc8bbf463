use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::PermissionsExt;

use xshell::{Shell, cmd};

use super::*;

fn amd64() -> crate::platform::Platform {
    crate::platform::Platform::linux("amd64")
}

/// Writes `rel` under `root` with `mode`, creating its parents.
fn write(root: &Path, rel: &str, contents: &str, mode: u32) -> PathBuf {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

fn mkdir(root: &Path, rel: &str, mode: u32) {
    let path = root.join(rel);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// An entry of an image's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    kind: char,
    mode: u32,
    owner: (u64, u64),
    contents: Vec<u8>,
}

fn a_dir(mode: u32, uid: u64, gid: u64) -> Meta {
    Meta {
        kind: 'd',
        mode,
        owner: (uid, gid),
        contents: Vec::new(),
    }
}

fn a_file(mode: u32, uid: u64, gid: u64, contents: &str) -> Meta {
    Meta {
        kind: 'f',
        mode,
        owner: (uid, gid),
        contents: contents.as_bytes().to_vec(),
    }
}

/// Adds the entries of the layer tar `bytes` (gzip-compressed or not) to
/// `fs`, later layers over earlier ones.
fn apply_layer(fs: &mut BTreeMap<String, Meta>, bytes: &[u8]) {
    let mut tar = Vec::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut tar)
            .unwrap();
    } else {
        tar = bytes.to_vec();
    }
    let mut archive = tar::Archive::new(tar.as_slice());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let raw = entry.path().unwrap().to_string_lossy().into_owned();
        let name = raw
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        assert!(!name.contains(".wh."), "a whiteout in a layer: {name}");
        if name.is_empty() {
            continue;
        }
        let header = entry.header().clone();
        let kind = match header.entry_type() {
            tar::EntryType::Directory => 'd',
            tar::EntryType::Regular | tar::EntryType::Continuous => 'f',
            other => panic!("{name}: an entry of type {other:?}"),
        };
        let mut contents = Vec::new();
        entry.read_to_end(&mut contents).unwrap();
        let meta = Meta {
            kind,
            mode: header.mode().unwrap() & 0o7777,
            owner: (header.uid().unwrap(), header.gid().unwrap()),
            contents,
        };
        fs.insert(name, meta);
    }
}

/// The filesystem of an assembled image.
fn filesystem(image: &oci::Image) -> BTreeMap<String, Meta> {
    let mut fs = BTreeMap::new();
    for layer in &image.layers {
        apply_layer(&mut fs, &layer.bytes);
    }
    fs
}

fn config_of(image: &oci::Image) -> serde_json::Value {
    serde_json::from_slice(&image.config.bytes).unwrap()
}

fn assemble_in(
    root: &Path,
    dockerfile: &str,
    staged: &[(String, PathBuf)],
) -> Result<oci::Image, Error> {
    let plan = super::plan(dockerfile, None).unwrap();
    let ignore = Ignore::load(root).unwrap();
    assemble(&plan, root, staged, &ignore, &amd64())
}

fn refusal(dockerfile: &str) -> NotPlannable {
    match plan(dockerfile, None) {
        Ok(plan) => panic!("planned, not refused: {dockerfile:?}\n{plan:?}"),
        Err(refusal) => refusal,
    }
}

#[test]
fn what_the_engine_must_build_is_refused_at_its_line() {
    let table: &[(&str, Option<usize>)] = &[
        ("FROM scratch\nRUN make\n", Some(2)),
        ("FROM alpine:3\n", Some(1)),
        ("FROM --platform=linux/amd64 scratch\n", Some(1)),
        ("FROM SCRATCH\n", Some(1)),
        ("FROM scratch\nADD a /a\n", Some(2)),
        ("ARG VERSION\nFROM scratch\n", Some(1)),
        ("FROM scratch\nARG VERSION\n", Some(2)),
        ("FROM scratch\nCOPY $SRC /a\n", Some(2)),
        ("FROM scratch\nENTRYPOINT [\"/app\", \"$HOME\"]\n", Some(2)),
        ("# escape=`\nFROM scratch\n", Some(1)),
        (
            "# syntax=docker/dockerfile:1\n# check=skip=all\nFROM scratch\n",
            Some(2),
        ),
        ("FROM scratch\nCOPY --chmod=0755 a /a\n", Some(2)),
        ("FROM scratch\nCOPY --from=build /a /a\n", Some(2)),
        ("FROM scratch\nCOPY --link a /a\n", Some(2)),
        ("FROM scratch\nCOPY --chown=app:app a /a\n", Some(2)),
        ("FROM scratch\nCOPY --chown=1:2:3 a /a\n", Some(2)),
        ("FROM scratch\nCOPY --chown=1 --chown=2 a /a\n", Some(2)),
        ("FROM scratch\nCOPY *.txt /a/\n", Some(2)),
        ("FROM scratch\nCOPY a?.txt /a/\n", Some(2)),
        ("FROM scratch\nCOPY ../a /a\n", Some(2)),
        ("FROM scratch\nCOPY . /app\n", Some(2)),
        ("FROM scratch\nCOPY ./ /app\n", Some(2)),
        ("FROM scratch\nCOPY https://example.com/a /a\n", Some(2)),
        ("FROM scratch\nCOPY a b /dir\n", Some(2)),
        ("FROM scratch\nCOPY a\n", Some(2)),
        ("FROM scratch\nCOPY a\\ b /c\n", Some(2)),
        ("FROM scratch\nCOPY \"a b\" /c\n", Some(2)),
        ("FROM scratch\nCOPY <<EOF /a\nhi\nEOF\n", Some(2)),
        ("FROM scratch\nCOPY .dev-env.Dockerfile /a\n", Some(2)),
        ("FROM scratch AS build\nFROM scratch\n", Some(2)),
        ("FROM scratch\nVOLUME /data\n", Some(2)),
        ("FROM scratch\nHEALTHCHECK NONE\n", Some(2)),
        ("FROM scratch\nSHELL [\"/bin/bash\", \"-c\"]\n", Some(2)),
        ("FROM scratch\nONBUILD COPY a /a\n", Some(2)),
        ("FROM scratch\nMAINTAINER someone\n", Some(2)),
        ("FROM scratch\nfrobnicate\n", Some(2)),
        ("FROM scratch\nWORKDIR /etc/app\n", Some(2)),
        ("FROM scratch\nWORKDIR /proc\n", Some(2)),
        ("FROM scratch\nEXPOSE 8000-8010\n", Some(2)),
        ("FROM scratch\nEXPOSE 80/TCP\n", Some(2)),
        ("FROM scratch\nSTOPSIGNAL SIGNOPE\n", Some(2)),
        ("FROM scratch\nCMD [\"/app\", 1]\n", Some(2)),
        ("FROM scratch\nCMD [\"/app\"\n", Some(2)),
        ("FROM scratch\nCMD []\n", Some(2)),
        ("FROM scratch\nCMD --help\n", Some(2)),
        ("FROM scratch\nENV A=1 B\n", Some(2)),
        ("FROM scratch\nENV A=\"open\n", Some(2)),
        ("FROM scratch\nENV ONLY\n", Some(2)),
        ("FROM scratch\nUSER app group\n", Some(2)),
        ("FROM scratch\nUSER --help\n", Some(2)),
        ("FROM scratch\nCOPY a /a\u{a0}\n", Some(2)),
        ("FROM scratch\nCOPY a /a\u{b}\n", Some(2)),
        ("# a comment\nCOPY a /a\nFROM scratch\n", Some(2)),
        // The line of an instruction is its first; comments and blank lines
        // inside a continuation count as lines.
        (
            "FROM scratch\n\nCOPY a \\\n  # note\n\n  /b\nRUN x\n",
            Some(7),
        ),
        ("", None),
        ("# only a comment\n", None),
    ];
    for (dockerfile, line) in table {
        assert_eq!(refusal(dockerfile).line, *line, "{dockerfile:?}");
    }
    let refused = refusal("FROM scratch\nRUN make\n");
    assert_eq!(
        refused.to_string(),
        "the engine builds it: line 2 `RUN make` needs it: dev-env runs no commands"
    );
    assert_eq!(
        refusal("").to_string(),
        "the engine builds it: it has no FROM instruction"
    );
}

/// Every instruction of the subset, in the forms the engine reads.
const SUBSET: &str = "\u{feff}# syntax=docker/dockerfile:1\n\
        # A comment.\n\
        from scratch as Runtime\n\
        COPY --chown=10 a /bin/b /app/\n\
        copy [\"c d\", \"rel/\"]\n\
        WORKDIR /srv\n\
        WORKDIR data/\n\
        COPY e .\n\
        ENV A=1 B=\"two words\" \\\n    C='x y'\n\
        Env D legacy  value\n\
        ENV A=3\n\
        LABEL \"k 1\"=v1 k2=v2\n\
        USER 65532:65532\n\
        EXPOSE 8080 53/udp\n\
        STOPSIGNAL sigint\n\
        CMD serve --port \"80\"\n\
        ENTRYPOINT [\"/app/bin\", \"--flag=\\\\\"]\n";

#[test]
fn the_subset_is_read_as_the_engine_reads_it() {
    let plan = super::plan(SUBSET, Some("RUNTIME")).unwrap();
    assert_eq!(plan.stage.as_deref(), Some("runtime"));
    let copy = |line, sources: &[&str], dest: &str, dest_is_dir, owner, instruction: &str| {
        Step::Copy(CopyStep {
            line,
            instruction: instruction.to_string(),
            sources: sources.iter().map(|s| s.to_string()).collect(),
            dest: dest.to_string(),
            dest_is_dir,
            owner,
        })
    };
    assert_eq!(
        plan.steps,
        [
            copy(
                4,
                &["a", "bin/b"],
                "/app",
                true,
                (10, 10),
                "COPY --chown=10 a /bin/b /app/"
            ),
            copy(
                5,
                &["c d"],
                "/rel",
                true,
                (0, 0),
                "copy [\"c d\", \"rel/\"]"
            ),
            Step::Workdir {
                line: 6,
                path: String::from("/srv")
            },
            Step::Workdir {
                line: 7,
                path: String::from("/srv/data")
            },
            copy(8, &["e"], "/srv/data", false, (0, 0), "COPY e ."),
        ]
    );
    let config = &plan.config;
    assert_eq!(
        config.env,
        [
            DEFAULT_PATH,
            "A=3",
            "B=two words",
            "C=x y",
            "D=legacy  value"
        ]
    );
    assert_eq!(
        config.labels,
        BTreeMap::from([("k 1".into(), "v1".into()), ("k2".into(), "v2".into())])
    );
    assert_eq!(config.user.as_deref(), Some("65532:65532"));
    assert_eq!(config.working_dir.as_deref(), Some("/srv/data"));
    assert_eq!(
        config.exposed_ports.iter().collect::<Vec<_>>(),
        ["53/udp", "8080/tcp"]
    );
    assert_eq!(config.stop_signal.as_deref(), Some("sigint"));
    // A CMD before the ENTRYPOINT in the same stage stays.
    assert_eq!(
        config.cmd.as_deref(),
        Some(&["/bin/sh", "-c", "serve --port \"80\""].map(String::from)[..])
    );
    assert_eq!(
        config.entrypoint.as_deref(),
        Some(&["/app/bin", "--flag=\\"].map(String::from)[..])
    );
    assert_eq!(plan.instructions.len(), 15);
}

#[test]
fn the_target_must_be_the_stage() {
    assert!(super::plan("FROM scratch AS runtime\n", Some("Runtime")).is_ok());
    assert!(super::plan("FROM scratch AS runtime\n", Some("other")).is_err());
    assert!(super::plan("FROM scratch\n", Some("runtime")).is_err());
    assert!(super::plan("FROM scratch\n", Some("")).is_ok());
}

#[test]
fn entrypoint_clears_only_a_cmd_it_follows_in_no_stage_and_env_replaces_in_place() {
    let plan = super::plan(
        "FROM scratch\nENTRYPOINT [\"a\"]\nENV PATH=/bin\nENV X=1\nENV PATH /usr/bin\n",
        None,
    )
    .unwrap();
    assert_eq!(plan.config.cmd, None);
    assert_eq!(plan.config.env, ["PATH=/usr/bin", "X=1"]);
    let plan = super::plan("FROM scratch\nCMD [\"b\"]\nENTRYPOINT /bin/a -v\n", None).unwrap();
    assert_eq!(plan.config.cmd, Some(vec![String::from("b")]));
    assert_eq!(
        plan.config.entrypoint,
        Some(["/bin/sh", "-c", "/bin/a -v"].map(String::from).to_vec())
    );
}

#[test]
fn the_demo_dockerfile_is_assembled_with_the_staged_binary() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../demo/controller-manager");
    let text = std::fs::read_to_string(demo.join("Dockerfile")).unwrap();
    let plan = super::plan(&text, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let context = dir.path().join("context");
    std::fs::create_dir(&context).unwrap();
    std::fs::copy(demo.join(".dockerignore"), context.join(".dockerignore")).unwrap();
    write(&context, "Cargo.toml", "[package]", 0o644);
    // Staged with mode 0644 on disk: the packed context has it as 0755.
    let binary = write(
        dir.path(),
        "target/controller-manager",
        "\x7fELF demo",
        0o644,
    );
    let staged = [(String::from("controller-manager"), binary)];
    let ignore = Ignore::load(&context).unwrap();
    let image = assemble(&plan, &context, &staged, &ignore, &amd64()).unwrap();
    let config = config_of(&image);
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/controller-manager"])
    );
    assert_eq!(config["config"]["Env"], json!([DEFAULT_PATH]));
    assert!(config["config"].get("Cmd").is_none());
    assert_eq!(
        filesystem(&image),
        BTreeMap::from([(
            "controller-manager".into(),
            a_file(0o755, 0, 0, "\x7fELF demo")
        )])
    );
}

#[test]
fn copy_destinations_follow_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "a.txt", "a", 0o640);
    write(root, "sub/b.txt", "b", 0o604);
    let image = assemble_in(
        root,
        "FROM scratch\n\
         COPY a.txt /one\n\
         COPY a.txt /two/\n\
         COPY a.txt sub/b.txt /three/\n\
         WORKDIR /w\n\
         COPY a.txt rel\n\
         COPY sub/b.txt .\n\
         COPY a.txt /w\n\
         COPY --chown=5:6 a.txt /deep/er/\n\
         COPY sub/b.txt /\n",
        &[],
    )
    .unwrap();
    let expected = BTreeMap::from([
        ("b.txt".into(), a_file(0o604, 0, 0, "b")),
        ("deep".into(), a_dir(0o755, 5, 6)),
        ("deep/er".into(), a_dir(0o755, 5, 6)),
        ("deep/er/a.txt".into(), a_file(0o640, 5, 6, "a")),
        ("one".into(), a_file(0o640, 0, 0, "a")),
        ("three".into(), a_dir(0o755, 0, 0)),
        ("three/a.txt".into(), a_file(0o640, 0, 0, "a")),
        ("three/b.txt".into(), a_file(0o604, 0, 0, "b")),
        ("two".into(), a_dir(0o755, 0, 0)),
        ("two/a.txt".into(), a_file(0o640, 0, 0, "a")),
        ("w".into(), a_dir(0o755, 0, 0)),
        // `/w` is a directory by then: the file goes inside it.
        ("w/a.txt".into(), a_file(0o640, 0, 0, "a")),
        ("w/b.txt".into(), a_file(0o604, 0, 0, "b")),
        ("w/rel".into(), a_file(0o640, 0, 0, "a")),
    ]);
    assert_eq!(filesystem(&image), expected);
}

#[test]
fn a_directory_source_copies_its_contents_recursively() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    mkdir(root, "conf", 0o750);
    write(root, "conf/app.toml", "app", 0o600);
    write(root, "conf/sub/x", "x", 0o644);
    mkdir(root, "conf/sub", 0o700);
    write(root, "conf/skip.log", "log", 0o644);
    write(root, "conf/drafts/keep.md", "keep", 0o644);
    write(root, "conf/drafts/draft.md", "draft", 0o644);
    mkdir(root, "conf/drafts", 0o700);
    write(
        root,
        ".dockerignore",
        "conf/*.log\nconf/drafts\n!conf/drafts/keep.md\n",
        0o644,
    );
    let image = assemble_in(
        root,
        "FROM scratch\nCOPY --chown=7 conf /srv/conf\nCOPY conf/sub /srv/conf/\n",
        &[],
    )
    .unwrap();
    let expected = BTreeMap::from([
        ("srv".into(), a_dir(0o755, 0, 0)),
        // New: mode 0755 and the COPY's owner, not the source's mode.
        ("srv/conf".into(), a_dir(0o755, 7, 7)),
        ("srv/conf/app.toml".into(), a_file(0o600, 7, 7, "app")),
        // Excluded, with an exception inside: made on the way, 0755.
        ("srv/conf/drafts".into(), a_dir(0o755, 7, 7)),
        (
            "srv/conf/drafts/keep.md".into(),
            a_file(0o644, 7, 7, "keep"),
        ),
        ("srv/conf/sub".into(), a_dir(0o700, 7, 7)),
        ("srv/conf/sub/x".into(), a_file(0o644, 7, 7, "x")),
        // The second COPY: into the existing directory, which keeps its owner.
        ("srv/conf/x".into(), a_file(0o644, 0, 0, "x")),
    ]);
    assert_eq!(filesystem(&image), expected);
}

#[test]
fn an_excluded_or_missing_source_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "secret.txt", "s", 0o644);
    write(root, "private/key", "k", 0o600);
    write(root, ".dockerignore", "secret.txt\nprivate\n", 0o644);
    for (source, line) in [
        ("secret.txt", 2),
        ("private", 3),
        ("private/key", 4),
        ("absent", 5),
    ] {
        let dockerfile = format!(
            "FROM scratch\n{}COPY {source} /dest\n",
            "\n".repeat(line - 2)
        );
        let err = assemble_in(root, &dockerfile, &[]).unwrap_err();
        assert!(
            matches!(&err, Error::NotFound { path, line: at, .. } if path == source && *at == line),
            "{source}: {err:?}"
        );
        assert!(
            err.to_string().contains("excluded by .dockerignore"),
            "{err}"
        );
    }
}

#[test]
fn staged_files_take_precedence_over_the_context() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("context");
    write(&root, "server", "decoy", 0o600);
    write(&root, ".dockerignore", "server\n", 0o644);
    let staged = [(
        String::from("server"),
        write(dir.path(), "bin/server", "real", 0o700),
    )];
    let image = assemble_in(&root, "FROM scratch\nCOPY /server /bin/\n", &staged).unwrap();
    assert_eq!(
        filesystem(&image),
        BTreeMap::from([
            ("bin".into(), a_dir(0o755, 0, 0)),
            ("bin/server".into(), a_file(0o755, 0, 0, "real")),
        ])
    );
    let err = assemble_in(&root, "FROM scratch\nCOPY server/x /x\n", &staged).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

#[test]
fn what_only_the_context_shows_is_left_to_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "a", "a", 0o644);
    std::os::unix::fs::symlink("a", root.join("link")).unwrap();
    write(root, "tree/file", "f", 0o644);
    std::os::unix::fs::symlink("file", root.join("tree/link")).unwrap();
    write(root, "setuid", "s", 0o4755);
    for source in ["link", "tree", "setuid"] {
        let err = assemble_in(root, &format!("FROM scratch\nCOPY {source} /x\n"), &[]).unwrap_err();
        assert!(err.needs_engine(), "{source}: {err:?}");
        assert!(
            err.to_string().starts_with("the engine builds it: line 2"),
            "{err}"
        );
    }
}

#[test]
fn a_file_where_a_directory_is_needed_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a", "a", 0o644);
    let err = assemble_in(dir.path(), "FROM scratch\nCOPY a /f\nCOPY a /f/x/\n", &[]).unwrap_err();
    assert!(
        matches!(&err, Error::NotADirectory { path, line: 3, .. } if path == "f"),
        "{err:?}"
    );
    let err = assemble_in(dir.path(), "FROM scratch\nCOPY a /f\nWORKDIR /f/g\n", &[]).unwrap_err();
    assert!(
        matches!(&err, Error::NotADirectory { line: 3, .. }),
        "{err:?}"
    );
}

#[test]
fn the_config_holds_what_was_set_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let image = assemble_in(
        dir.path(),
        "FROM scratch\nUSER 1000\nEXPOSE 8080\nLABEL tier=web\nSTOPSIGNAL SIGINT\n",
        &[],
    )
    .unwrap();
    // Nothing written: no layer, as the engine's image has none.
    assert!(image.layers.is_empty());
    let config = config_of(&image);
    assert_eq!(
        config["config"],
        json!({
            "Env": [DEFAULT_PATH],
            "User": "1000",
            "ExposedPorts": {"8080/tcp": {}},
            "Labels": {"tier": "web"},
            "StopSignal": "SIGINT",
        })
    );
    assert_eq!(config["rootfs"], json!({"type": "layers", "diff_ids": []}));
    assert_eq!(config["history"][0]["empty_layer"], true);
    assert_eq!(
        (&config["os"], &config["architecture"]),
        (&json!("linux"), &json!("amd64"))
    );
    assert!(config.get("variant").is_none());
    let plan = super::plan("FROM scratch\n", None).unwrap();
    let arm = assemble(
        &plan,
        dir.path(),
        &[],
        &Ignore::default(),
        &crate::platform::Platform::linux("aarch64"),
    )
    .unwrap();
    let config = config_of(&arm);
    assert_eq!(
        (&config["architecture"], &config["variant"]),
        (&json!("arm64"), &json!("v8"))
    );
}

#[test]
fn the_same_inputs_give_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "a", "a", 0o644);
    write(root, "d/b", "b", 0o600);
    let dockerfile = "FROM scratch\nCOPY a d /app/\nWORKDIR /app/w\nENTRYPOINT [\"/app/a\"]\n";
    let one = assemble_in(root, dockerfile, &[]).unwrap();
    let two = assemble_in(root, dockerfile, &[]).unwrap();
    assert_eq!(one.manifest.bytes, two.manifest.bytes);
    assert_eq!(one, two);
    let layer = &one.layers[0];
    assert_eq!(layer.media_type, oci::OCI_LAYER_GZIP);
    // gzip header: no mtime (bytes 4..8), no file name (bit 3 of byte 3).
    assert_eq!(&layer.bytes[4..8], &[0, 0, 0, 0]);
    assert_eq!(layer.bytes[3] & 0x08, 0);
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(layer.bytes.as_ref())
        .read_to_end(&mut tar)
        .unwrap();
    let config = config_of(&one);
    assert_eq!(config["rootfs"]["diff_ids"][0], oci::sha256_digest(&tar));
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut names = Vec::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.header().mtime().unwrap(), 0);
        assert_eq!(entry.header().username().unwrap(), Some(""));
        names.push(entry.path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(names, ["app/", "app/a", "app/b", "app/w/"]);
}

/// The Dockerfile built by the engine and by dev-env in the equivalence test.
const EQUIVALENCE: &str = r#"# syntax=docker/dockerfile:1
# Everything dev-env carries out, once.
FROM scratch AS runtime
WORKDIR /app
COPY server settings.toml ./
COPY --chown=1000:1001 conf/x.conf /etc/x.conf
COPY --chown=2000 assets /srv/www/
COPY server /app
ENV APP_MODE=production \
    GREETING="hello world"
ENV LEGACY value with spaces
env PATH=/app:/usr/bin
LABEL org.opencontainers.image.title="equivalence test" tier=backend
CMD serve --port 8080
ENTRYPOINT ["/app/server"]
EXPOSE 8080 9090/udp
USER 65532:65532
STOPSIGNAL SIGINT
WORKDIR data
"#;

/// Runs a docker command; its stdout. Fails loudly without Docker.
fn docker(cmd: xshell::Cmd<'_>) -> Result<Vec<u8>, String> {
    let output = cmd
        .env("DOCKER_BUILDKIT", "0")
        .quiet()
        .ignore_status()
        .output()
        .expect("this test runs `docker`: it needs the Docker CLI and a running engine");
    match output.status.success() {
        true => Ok(output.stdout),
        false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

/// Removes the test's image, also when an assertion fails.
struct RemoveImage<'a> {
    sh: &'a Shell,
    tag: String,
}

impl Drop for RemoveImage<'_> {
    fn drop(&mut self) {
        let tag = &self.tag;
        let _ = docker(cmd!(self.sh, "docker image rm --force {tag}"));
    }
}

/// The filesystem of the image `docker save` wrote: its layers, in order.
fn saved_filesystem(saved: &[u8]) -> BTreeMap<String, Meta> {
    let mut files = HashMap::new();
    let mut archive = tar::Archive::new(saved);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        files.insert(name, bytes);
    }
    let manifest: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    let mut fs = BTreeMap::new();
    for layer in manifest[0]["Layers"].as_array().unwrap() {
        apply_layer(&mut fs, &files[layer.as_str().unwrap()]);
    }
    fs
}

/// The equivalence test's context, staged binary and Dockerfile.
fn equivalence_context(root: &Path) -> (PathBuf, Vec<(String, PathBuf)>) {
    let context = root.join("context");
    write(&context, "Dockerfile", EQUIVALENCE, 0o644);
    write(
        &context,
        "server",
        "a decoy the staged binary replaces",
        0o600,
    );
    write(&context, "settings.toml", "port = 8080", 0o640);
    write(&context, "conf/x.conf", "x = 1", 0o600);
    mkdir(&context, "conf", 0o750);
    write(&context, "assets/index.html", "<html>", 0o644);
    write(
        &context,
        "assets/build.log",
        "kept: `*.log` is for the root",
        0o644,
    );
    write(&context, "assets/css/site.css", "body {}", 0o600);
    mkdir(&context, "assets/css", 0o700);
    write(&context, "assets/secret.txt", "excluded", 0o644);
    write(
        &context,
        "assets/drafts/keep.md",
        "kept by an exception",
        0o644,
    );
    write(&context, "assets/drafts/draft.md", "excluded", 0o644);
    mkdir(&context, "assets/drafts", 0o700);
    mkdir(&context, "assets", 0o750);
    write(
        &context,
        ".dockerignore",
        "assets/secret.txt\nassets/drafts\n!assets/drafts/keep.md\n*.log\n",
        0o644,
    );
    let binary = write(root, "target/server", "\x7fELF the server", 0o644);
    (context, vec![(String::from("server"), binary)])
}

#[test]
fn the_engine_builds_the_same_image() {
    let dir = tempfile::tempdir().unwrap();
    let (context, staged) = equivalence_context(dir.path());
    let packed =
        super::super::context::pack(&context, &context.join("Dockerfile"), &staged).unwrap();
    let sh = Shell::new().unwrap();
    let tag = format!("dev-env-dockerfile-equivalence:{}", std::process::id());
    let _remove = RemoveImage {
        sh: &sh,
        tag: tag.clone(),
    };
    let dockerfile = &packed.dockerfile;
    let build =
        cmd!(sh, "docker build --quiet --tag {tag} --file {dockerfile} -").stdin(&packed.tar);
    docker(build).unwrap_or_else(|e| panic!("the engine did not build the image: {e}"));
    let format = "{{json .Config}}";
    let inspected = docker(cmd!(sh, "docker image inspect --format {format} {tag}")).unwrap();
    let engine: serde_json::Value = serde_json::from_slice(&inspected).unwrap();
    let saved = docker(cmd!(sh, "docker save {tag}")).unwrap();

    let image = assemble_in(&context, EQUIVALENCE, &staged).unwrap();
    let ours = config_of(&image)["config"].clone();
    let absent = |v: Option<&serde_json::Value>| match v {
        None | Some(serde_json::Value::Null) => serde_json::Value::Null,
        Some(v) if v == "" || v == &json!({}) => serde_json::Value::Null,
        Some(v) => v.clone(),
    };
    let keys = [
        "User",
        "Env",
        "WorkingDir",
        "Entrypoint",
        "Cmd",
        "ExposedPorts",
        "Labels",
        "StopSignal",
    ];
    for key in keys {
        assert_eq!(
            absent(ours.get(key)),
            absent(engine.get(key)),
            "config `{key}`"
        );
    }
    assert_eq!(ours["WorkingDir"], "/app/data");
    let engine_fs = saved_filesystem(&saved);
    assert_eq!(filesystem(&image), engine_fs);
    assert_eq!(
        engine_fs["app/server"],
        a_file(0o755, 0, 0, "\x7fELF the server")
    );
    assert!(engine_fs.contains_key("srv/www/drafts/keep.md"));
    assert!(!engine_fs.contains_key("srv/www/secret.txt"));

    // `--chmod`: the engine refuses it, so dev-env leaves it to the engine.
    let chmod = "FROM scratch\nCOPY --chmod=0644 settings.toml /s\n";
    std::fs::write(context.join("Dockerfile"), chmod).unwrap();
    let packed = super::super::context::pack(&context, &context.join("Dockerfile"), &[]).unwrap();
    let refused = docker(cmd!(sh, "docker build --quiet --file Dockerfile -").stdin(&packed.tar))
        .expect_err("the classic builder refuses --chmod");
    assert!(refused.contains("--chmod"), "{refused}");
    assert_eq!(refusal(chmod).line, Some(2));
}

#[test]
fn the_inputs_key_changes_with_any_source_and_nothing_else() {
    let context = tempfile::tempdir().unwrap();
    std::fs::create_dir(context.path().join("assets")).unwrap();
    std::fs::write(context.path().join("assets/a.txt"), "a").unwrap();
    let bin = context.path().join("built-elsewhere");
    std::fs::write(&bin, "binary one").unwrap();
    let staged = [(String::from("server"), bin.clone())];
    let text = "FROM scratch\nCOPY server /server\nCOPY assets /assets/\n";
    let plan = plan(text, None).unwrap();
    let amd64 = crate::platform::Platform::linux("amd64");
    let key = || inputs_key(&plan, text, context.path(), &staged, &amd64).unwrap();
    let first = key();
    assert_eq!(key(), first, "nothing changed");
    std::fs::write(context.path().join("assets/b.txt"), "b").unwrap();
    let second = key();
    assert_ne!(second, first, "a file added to a copied directory");
    std::fs::remove_file(&bin).unwrap();
    std::fs::write(&bin, "binary two, rebuilt").unwrap();
    assert_ne!(key(), second, "the staged binary rebuilt");
    let arm = crate::platform::Platform::linux("arm64");
    assert_ne!(
        inputs_key(&plan, text, context.path(), &staged, &arm).unwrap(),
        key(),
        "another platform"
    );
    std::fs::remove_dir_all(context.path().join("assets")).unwrap();
    assert!(inputs_key(&plan, text, context.path(), &staged, &amd64).is_none());
}
