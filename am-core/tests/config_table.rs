//! The README's table of environment variables is the one `config::markdown_table` produces,
//! and every `AMNET_*` name the workspace's code mentions is in `config::VARS` (or is a
//! constant of the C header).
//!
//! `UPDATE_README=1 cargo test -p amnet-core --test config_table` rewrites the README's table.

use std::path::{Path, PathBuf};

use amnet_core::config::{lookup, markdown_table};

const BEGIN: &str = "<!-- env-table: generated from amnet_core::config::VARS -->\n";
const END: &str = "<!-- end env-table -->";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

#[test]
fn readme_table_is_generated_from_vars() {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let start = readme
        .find(BEGIN)
        .expect("README.md lacks the env-table start marker")
        + BEGIN.len();
    let end = start
        + readme[start..]
            .find(END)
            .expect("README.md lacks the env-table end marker");
    let want = markdown_table();
    if readme[start..end] == want {
        return;
    }
    if std::env::var_os("UPDATE_README").is_some() {
        let new = format!("{}{want}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, new).expect("rewrite README.md");
        return;
    }
    panic!(
        "README.md's variable table differs from config::VARS; run UPDATE_README=1 cargo test \
         -p amnet-core --test config_table, or paste:\n{want}"
    );
}

/// Every `AMNET_[A-Z0-9_]*` word in the workspace's Rust sources and CI scripts.
fn names_in(dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                names_in(&p, out);
            }
            continue;
        }
        if !(name.ends_with(".rs") || name.ends_with(".sh")) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("AMNET_") {
            let tail = &rest[i..];
            let len = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            let word = &tail[..len];
            // `AMNET_UDP_*` and the bare prefix name groups, not variables.
            let group = word.ends_with('_') || tail[len..].starts_with('*');
            if !group {
                out.push((word.to_string(), p.clone()));
            }
            rest = &tail[len..];
        }
    }
}

#[test]
fn every_variable_the_code_names_is_in_the_table() {
    let mut found = Vec::new();
    names_in(&root(), &mut found);
    assert!(
        found.iter().any(|(n, _)| n == "AMNET_CONDUIT"),
        "the scan found nothing: {found:?}"
    );
    // The C header's constants (`AMNET_OK`, `AMNET_COLL_SINGLE`, ...) are named in the C
    // ABI's sources and docs; they are not variables.
    let header = std::fs::read_to_string(root().join("capi/include/amnet.h")).unwrap_or_default();
    let constants: std::collections::HashSet<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let unknown: Vec<String> = found
        .iter()
        .filter(|(n, _)| lookup(n).is_none() && !constants.contains(n.as_str()))
        .map(|(n, p)| format!("{n} in {}", p.display()))
        .collect();
    assert!(
        unknown.is_empty(),
        "variables missing from amnet_core::config::VARS: {unknown:?}"
    );
}
