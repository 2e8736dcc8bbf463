//! Generates `schema.txt` from the sources of the k8s-pb crate (messages, field tags and types,
//! the kind of each resource message) and of the k8s-openapi crate (each field's JSON name and
//! whether it is required), for the messages the served built-in kinds reach. The test fails when
//! the checked-in table differs; `KUBE_SIM_REGENERATE=1` rewrites it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// One field of a k8s-pb message.
struct PbField {
    tag: u32,
    /// The Rust field name, without `r#`.
    name: String,
    /// `one`, `many` or `map`.
    card: &'static str,
    /// A scalar type or a message path.
    ty: String,
}

/// What the k8s-pb sources say: messages by path, and the message of each `(apiVersion, kind)`.
#[derive(Default)]
struct Pb {
    messages: HashMap<String, Vec<PbField>>,
    kinds: BTreeMap<(String, String), String>,
}

/// What the k8s-openapi sources say of one type: JSON names by Rust field name, required fields.
#[derive(Default)]
struct OpenApiType {
    json: HashMap<String, String>,
    required: HashSet<String>,
}

/// The `src` folder of a dependency, found with `cargo metadata`.
fn crate_src(name: &str) -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");
    let package = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} is a dependency"));
    let manifest = PathBuf::from(package["manifest_path"].as_str().expect("a manifest path"));
    manifest.parent().expect("a crate folder").join("src")
}

/// Every `.rs` file under `dir`, with its module path relative to `root` (`api.core.v1`).
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("a readable folder")
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .parent()
                .expect("a parent")
                .strip_prefix(root)
                .expect("under root");
            let module: Vec<String> = rel
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            out.push((module.join("."), path));
        }
    }
}

/// The message path a Rust type names, from inside `module`.
fn resolve(module: &str, ty: &str) -> String {
    // Long declarations wrap with a trailing comma inside the generic arguments.
    let mut ty: String = ty.chars().filter(|c| !c.is_whitespace()).collect();
    ty = ty.replace(",>", ">");
    for wrapper in [
        "::core::option::Option<",
        "::prost::alloc::vec::Vec<",
        "::prost::alloc::boxed::Box<",
    ] {
        while let Some(inner) = ty.strip_prefix(wrapper) {
            ty = inner
                .strip_suffix('>')
                .expect("a closed generic")
                .to_string();
        }
    }
    let map = [
        "::std::collections::BTreeMap<",
        "::prost::alloc::collections::BTreeMap<",
    ];
    if let Some(inner) = map.iter().find_map(|prefix| ty.strip_prefix(prefix)) {
        let (_, value) = inner.split_once(',').expect("a map has a value type");
        let value = value.strip_suffix('>').expect("a closed map");
        return resolve(module, value);
    }
    let mut segments: Vec<&str> = module.split('.').collect();
    let mut rest: Vec<&str> = ty.split("::").collect();
    while rest.first() == Some(&"super") {
        segments.pop();
        rest.remove(0);
    }
    segments.extend(rest);
    segments.join(".")
}

/// One `#[prost(...)]` attribute and the field declaration after it.
fn pb_field(module: &str, attr: &str, decl: &str) -> PbField {
    let tag = attr
        .split("tag = \"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .and_then(|t| t.parse().ok())
        .expect("a tag");
    let decl = decl.trim().strip_prefix("pub ").expect("a public field");
    let (name, ty) = decl.split_once(':').expect("a typed field");
    let name = name.trim().trim_start_matches("r#").to_string();
    let ty = ty.trim().trim_end_matches(',');
    let spec = attr.trim_start_matches("#[prost(");
    let (card, scalar) = if let Some(map) = spec.strip_prefix("btree_map = \"string, ") {
        ("map", map.split('"').next().expect("a map value type"))
    } else {
        let first = spec.split([',', ' ']).next().expect("a type");
        (
            if spec.contains(" repeated") {
                "many"
            } else {
                "one"
            },
            first,
        )
    };
    let ty = match scalar {
        "message" => resolve(module, ty),
        other => other.to_string(),
    };
    PbField {
        tag,
        name,
        card,
        ty,
    }
}

/// Reads one k8s-pb module file.
fn read_pb_module(module: &str, text: &str, pb: &mut Pb) {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut current: Option<String> = None;
    let mut resource: Option<(String, Option<String>)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(name) = line
            .strip_prefix("pub struct ")
            .and_then(|l| l.strip_suffix(" {}"))
        {
            pb.messages.entry(format!("{module}.{name}")).or_default();
        } else if let Some(name) = line
            .strip_prefix("pub struct ")
            .and_then(|l| l.strip_suffix(" {"))
        {
            current = Some(format!("{module}.{name}"));
            pb.messages.entry(format!("{module}.{name}")).or_default();
        } else if line == "}" {
            current = None;
        } else if let (Some(message), true) = (&current, line.starts_with("#[prost(")) {
            let mut decl = String::new();
            let mut j = i + 1;
            while j < lines.len() {
                if !lines[j].starts_with("///") && !lines[j].starts_with("#[") {
                    decl.push_str(lines[j]);
                }
                if decl.ends_with(',') && decl.matches('<').count() == decl.matches('>').count() {
                    break;
                }
                j += 1;
            }
            let field = pb_field(module, line, &decl);
            pb.messages.entry(message.clone()).or_default().push(field);
            i = j;
        } else if let Some(name) = line
            .strip_prefix("impl crate::Resource for ")
            .and_then(|l| l.strip_suffix(" {"))
        {
            resource = Some((format!("{module}.{name}"), None));
        } else if let (Some((_, version)), Some(v)) =
            (&mut resource, quoted(line, "const API_VERSION"))
        {
            *version = Some(v);
        } else if let (Some((message, Some(version))), Some(kind)) =
            (&resource, quoted(line, "const KIND"))
        {
            pb.kinds.insert((version.clone(), kind), message.clone());
            resource = None;
        }
        i += 1;
    }
}

/// The string constant of a `const NAME: &'static str = "value";` line.
fn quoted(line: &str, prefix: &str) -> Option<String> {
    line.strip_prefix(prefix)?
        .split('"')
        .nth(1)
        .map(str::to_string)
}

/// Reads one k8s-openapi type file, keyed by its lowercased path (`api.core.v1.podspec`).
fn read_openapi_type(module: &str, text: &str) -> Option<(String, OpenApiType)> {
    let lines: Vec<&str> = text.lines().collect();
    let name = lines
        .iter()
        .find_map(|l| l.strip_prefix("pub struct ")?.strip_suffix(" {"))?;
    let mut ty = OpenApiType::default();
    let body_end = lines.iter().position(|l| *l == "}").unwrap_or(0);
    for (i, line) in lines[..body_end].iter().enumerate() {
        if let Some(decl) = line.strip_prefix("    pub ") {
            let (field, rest) = decl.split_once(':').unwrap_or((decl, ""));
            let rest = if rest.trim().is_empty() {
                lines.get(i + 1).copied().unwrap_or("")
            } else {
                rest
            };
            if !rest.trim().starts_with("Option<") {
                ty.required
                    .insert(field.trim_start_matches("r#").to_string());
            }
        }
    }
    for line in &lines {
        let line = line.trim();
        let key = line.split("=> Field::Key_").nth(1);
        if let (true, Some(json), Some(rust)) = (line.starts_with('"'), quoted(line, ""), key) {
            ty.json.insert(rust.trim_end_matches(',').to_string(), json);
        }
    }
    Some((format!("{module}.{}", name.to_lowercase()), ty))
}

fn normal(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').enumerate() {
        let mut chars = part.chars();
        if let (false, Some(c)) = (i == 0, chars.next()) {
            out.push(c.to_ascii_uppercase());
            out.extend(chars);
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The JSON name of a k8s-pb field and whether k8s-openapi has it as required.
fn json_name(openapi: Option<&OpenApiType>, field: &PbField) -> (String, bool) {
    let Some(ty) = openapi else {
        return (lower_camel(&field.name), false);
    };
    let found = ty
        .json
        .get(&field.name)
        .map(|j| (field.name.clone(), j.clone()))
        .or_else(|| {
            let want = normal(&field.name);
            ty.json
                .iter()
                .find(|(rust, json)| normal(rust) == want || normal(json) == want)
                .map(|(r, j)| (r.clone(), j.clone()))
        });
    match found {
        Some((rust, json)) => (json, ty.required.contains(&rust)),
        None => (lower_camel(&field.name), false),
    }
}

/// The table text for the served built-in kinds.
fn generate() -> String {
    let pb_root = crate_src("k8s-pb");
    let mut files = Vec::new();
    rust_files(&pb_root, &pb_root, &mut files);
    let mut pb = Pb::default();
    for (module, path) in files.iter().filter(|(m, _)| !m.is_empty()) {
        read_pb_module(
            module,
            &std::fs::read_to_string(path).expect("a k8s-pb file"),
            &mut pb,
        );
    }
    let openapi_root = std::fs::read_dir(crate_src("k8s-openapi"))
        .expect("k8s-openapi sources")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("v1_"))
        })
        .max_by_key(|p| {
            p.file_name()
                .and_then(|n| n.to_str()?.strip_prefix("v1_")?.parse::<u32>().ok())
        })
        .expect("a versioned k8s-openapi tree");
    let mut files = Vec::new();
    rust_files(&openapi_root, &openapi_root, &mut files);
    let openapi: HashMap<String, OpenApiType> = files
        .iter()
        .filter_map(|(m, p)| read_openapi_type(m, &std::fs::read_to_string(p).ok()?))
        .collect();
    let mut kinds: BTreeMap<(String, String), String> = crate::resource::built_ins()
        .iter()
        .map(|info| {
            let key = (info.api_version(&info.versions[0]), info.kind.clone());
            let message = pb
                .kinds
                .get(&key)
                .unwrap_or_else(|| panic!("k8s-pb has {key:?}"));
            (key, message.clone())
        })
        .collect();
    // The bodies of subresources and options, which k8s-pb gives no kind.
    for (api_version, kind, message) in [
        ("autoscaling/v1", "Scale", "api.autoscaling.v1.Scale"),
        (
            "authentication.k8s.io/v1",
            "TokenRequest",
            "api.authentication.v1.TokenRequest",
        ),
        (
            "meta.k8s.io/v1",
            "DeleteOptions",
            "apimachinery.pkg.apis.meta.v1.DeleteOptions",
        ),
    ] {
        assert!(pb.messages.contains_key(message), "k8s-pb has {message}");
        kinds.insert((api_version.into(), kind.into()), message.into());
    }
    render(&pb, &openapi, &kinds)
}

/// Writes the kinds and every message they reach.
fn render(
    pb: &Pb,
    openapi: &HashMap<String, OpenApiType>,
    kinds: &BTreeMap<(String, String), String>,
) -> String {
    let mut out = String::from(
        "# The protobuf schema of the served built-in kinds, generated by the test\n\
         # server::protobuf::generate::schema_is_current; KUBE_SIM_REGENERATE=1 rewrites it.\n",
    );
    let mut todo: Vec<String> = kinds.values().cloned().collect();
    let mut seen = BTreeSet::new();
    while let Some(m) = todo.pop() {
        if super::decode::SPECIAL.contains(&m.as_str()) || !seen.insert(m.clone()) {
            continue;
        }
        let fields = pb
            .messages
            .get(&m)
            .unwrap_or_else(|| panic!("k8s-pb has no message {m}"));
        for f in fields {
            if pb.messages.contains_key(&f.ty) {
                todo.push(f.ty.clone());
            } else {
                assert!(
                    !f.ty.contains('.'),
                    "{m}.{} has the unknown type {}",
                    f.name,
                    f.ty
                );
            }
        }
    }
    for ((api_version, kind), message) in kinds {
        out.push_str(&format!("kind {api_version} {kind} {message}\n"));
    }
    for m in &seen {
        out.push_str(&format!("message {m}\n"));
        let ty = openapi.get(&m.to_lowercase());
        let mut fields: Vec<&PbField> = pb.messages[m].iter().collect();
        fields.sort_by_key(|f| f.tag);
        for f in fields {
            let (json, required) = json_name(ty, f);
            let scalar = !pb.messages.contains_key(&f.ty);
            let card = if f.card == "one" && required && scalar {
                "req"
            } else {
                f.card
            };
            out.push_str(&format!("{} {json} {card} {}\n", f.tag, f.ty));
        }
    }
    out
}

#[test]
fn schema_is_current() {
    let text = generate();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/protobuf/schema.txt");
    if std::env::var_os("KUBE_SIM_REGENERATE").is_some() {
        std::fs::write(&path, &text).expect("schema.txt is written");
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == text,
        "schema.txt is stale: run this test with KUBE_SIM_REGENERATE=1"
    );
}
