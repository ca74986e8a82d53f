//! `seedlog`: run a broker, manage topics, and produce or consume from the shell.

#[cfg(not(madsim))]
mod cli;
#[cfg(not(madsim))]
mod groups;
#[cfg(not(madsim))]
mod perf;

/// Errors print as one line with their causes (`error: file: line 3: ...`), never a backtrace.
#[cfg(not(madsim))]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match cli::main().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(madsim)]
fn main() {
    eprintln!("the seedlog binary runs in the real world; the simulator is `cargo sim run -p seedlog-sim`");
    std::process::exit(2);
}
