//! Declares the workloads: every module under `src/` (a folder with `mod.rs`,
//! or a file) with a line starting `pub static WORKLOAD: Workload` is
//! declared here as `crate::NAME` and listed in
//! `harness::registry::WORKLOADS` (see that module), so a new workload is its
//! own module and nothing else: no line in `lib.rs`, no binding file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MARKER: &str = "pub static WORKLOAD: Workload";

fn declares_workload(file: &Path) -> bool {
    std::fs::read_to_string(file)
        .map(|text| text.lines().any(|l| l.starts_with(MARKER)))
        .unwrap_or(false)
}

fn main() {
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src/ is readable") {
        let path = entry.expect("src/ is readable").path();
        let (name, file) = if path.is_dir() {
            (path.file_name(), path.join("mod.rs"))
        } else if path.extension().is_some_and(|e| e == "rs") {
            (path.file_stem(), path.clone())
        } else {
            continue;
        };
        let name = name.unwrap().to_string_lossy().into_owned();
        if name != "lib" && declares_workload(&file) {
            found.push((name, file));
        }
    }
    found.sort();
    let mut out = String::from("// Written by build.rs: the modules that declare a WORKLOAD.\n");
    for (name, file) in &found {
        writeln!(
            out,
            "#[path = {:?}]\npub mod {name};",
            file.display().to_string()
        )
        .unwrap();
    }
    out.push_str("pub(crate) static DECLARED_WORKLOADS: &[&harness::registry::Workload] = &[");
    for (name, _) in &found {
        write!(out, "&{name}::WORKLOAD, ").unwrap();
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("workloads.rs");
    if std::fs::read_to_string(&dest).ok().as_deref() != Some(out.as_str()) {
        std::fs::write(&dest, out).expect("OUT_DIR is writable");
    }
}
