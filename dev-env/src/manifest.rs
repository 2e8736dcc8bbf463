//! The repository's Kubernetes manifests: every document of every YAML file
//! under the declared `manifests:` paths, read once, checked for the fields
//! an apply needs, and ordered the way they must be applied (CRDs, then
//! namespaces, then the rest).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One YAML document that declares a Kubernetes object.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file it came from.
    pub file: PathBuf,
    /// The 1-based line where its document starts.
    pub line: usize,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
    /// The whole object.
    pub object: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}; {fix}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        fix: String,
    },
}

/// Apply phases: CRDs must be established before their resources, and
/// namespaces must exist before what lives in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    CustomResourceDefinitions,
    Namespaces,
    Objects,
}

impl Manifest {
    pub fn phase(&self) -> Phase {
        match (self.api_version.as_str(), self.kind.as_str()) {
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                Phase::CustomResourceDefinitions
            }
            ("v1", "Namespace") => Phase::Namespaces,
            _ => Phase::Objects,
        }
    }

    /// `kind/namespace/name`, as a log line names it.
    pub fn display_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{}", self.kind, ns, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }
}

/// Reads every manifest under `paths` (files, or directories searched
/// recursively for `*.yaml` and `*.yml` in name order), in apply order;
/// within a phase, documents keep the order they were declared in.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Manifest>, Error> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    let mut manifests = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Read {
            path: file.clone(),
            source,
        })?;
        manifests.extend(parse(&file, &text)?);
    }
    manifests.sort_by_key(Manifest::phase);
    Ok(manifests)
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let read_err = |source| Error::Read {
        path: path.to_path_buf(),
        source,
    };
    if !path.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect_files(&entry, out)?;
        } else if entry.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(entry);
        }
    }
    Ok(())
}

/// Parses the documents of one file. Documents are split at `---` lines so
/// that every error keeps its position in the file.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Manifest>, Error> {
    let mut out = Vec::new();
    for (offset, doc) in split_documents(text) {
        let at = Document { file, offset, doc };
        if let Some(manifest) = at.parse()? {
            out.push(manifest);
        }
    }
    Ok(out)
}

/// One document of a manifest file, `offset` lines into it.
struct Document<'a> {
    file: &'a Path,
    offset: usize,
    doc: &'a str,
}

impl Document<'_> {
    /// The document's object; `None` when it is empty.
    fn parse(&self) -> Result<Option<Manifest>, Error> {
        let value = serde_yaml::Value::deserialize(serde_yaml::Deserializer::from_str(self.doc))
            .map_err(|e| {
                let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
                let message = format!("not valid YAML: {e}");
                self.invalid(
                    line,
                    column,
                    message,
                    "fix the YAML syntax at that position",
                )
            })?;
        if value.is_null() {
            return Ok(None);
        }
        let object: serde_json::Value = serde_json::to_value(&value).map_err(|e| {
            let message = format!("cannot be represented as JSON: {e}");
            self.invalid(1, 1, message, "use string keys and plain scalars")
        })?;
        let first = first_content_line(self.doc);
        let missing = |message: String, fix: &str| self.invalid(first, 1, message, fix);
        let Some(api_version) = string_at(&object, "/apiVersion") else {
            let fix = "add `apiVersion:` (for example `apps/v1`)";
            return Err(missing(String::from("document has no `apiVersion`"), fix));
        };
        let Some(kind) = string_at(&object, "/kind") else {
            let fix = "add `kind:` (for example `Deployment`)";
            return Err(missing(String::from("document has no `kind`"), fix));
        };
        let Some(name) = string_at(&object, "/metadata/name") else {
            let fix = "add `metadata: {name: ...}`; server-side apply needs a name";
            return Err(missing(format!("{kind} has no `metadata.name`"), fix));
        };
        Ok(Some(Manifest {
            file: self.file.to_path_buf(),
            line: first + self.offset,
            api_version,
            kind,
            name,
            namespace: string_at(&object, "/metadata/namespace"),
            object,
        }))
    }

    /// An error at `line`:`column` of the document.
    fn invalid(&self, line: usize, column: usize, message: String, fix: &str) -> Error {
        Error::Invalid {
            path: self.file.to_path_buf(),
            line: line + self.offset,
            column,
            message,
            fix: fix.to_string(),
        }
    }
}

/// The string at `pointer`, if there is one.
fn string_at(object: &serde_json::Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// Splits a YAML stream at `---` lines, returning each document with the
/// number of lines before it.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 0;
    let mut pos = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.starts_with("---") && line[3..].trim().is_empty() {
            docs.push((start_line, &text[start..pos]));
            start = pos + line.len();
            start_line = i + 1;
        }
        pos += line.len();
    }
    docs.push((start_line, &text[start..]));
    docs
}

fn first_content_line(doc: &str) -> usize {
    doc.lines()
        .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map_or(1, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_ordered_for_apply_and_keep_their_lines() {
        let text = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
---
# the namespace
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.example.com}
";
        let mut docs = parse(Path::new("m.yaml"), text).unwrap();
        docs.sort_by_key(Manifest::phase);
        let names: Vec<_> = docs.iter().map(|m| (m.display_name(), m.line)).collect();
        assert_eq!(
            names,
            [
                ("CustomResourceDefinition/pools.example.com".to_string(), 11),
                ("Namespace/shop".to_string(), 6),
                ("Deployment/shop/web".to_string(), 1),
            ]
        );
    }

    #[test]
    fn errors_name_the_line_in_the_file() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: [oops\n";
        let err = parse(Path::new("m.yaml"), text).unwrap_err().to_string();
        assert!(err.starts_with("m.yaml:"), "{err}");
        let line: usize = err.split(':').nth(1).unwrap().parse().unwrap();
        assert!(line >= 7, "{err}");

        let err = parse(Path::new("m.yaml"), "apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("m.yaml:1:1: ConfigMap has no `metadata.name`"),
            "{err}"
        );
    }
}
