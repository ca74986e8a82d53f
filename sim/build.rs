//! Records the commit the simulator is built from (`+dirty` when tracked files differ from it),
//! so a repro line names the code that produced the run, wherever the binary runs.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|status| !status.is_empty());
            if dirty {
                format!("{head}+dirty")
            } else {
                head
            }
        }
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=SEEDLOG_COMMIT={commit}");
    for path in [
        "src",
        "../src",
        "../Cargo.toml",
        "../Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
    for dir in [
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ]
    .into_iter()
    .flatten()
    {
        for file in ["HEAD", "index", "refs", "packed-refs"] {
            println!("cargo:rerun-if-changed={dir}/{file}");
        }
    }
}
