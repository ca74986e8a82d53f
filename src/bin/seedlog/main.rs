//! `seedlog`: run a broker, manage topics, and produce or consume from the shell.

#[cfg(not(madsim))]
mod cli;

#[cfg(not(madsim))]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    cli::main().await
}

#[cfg(madsim)]
fn main() {
    eprintln!("the seedlog binary runs in the real world; the simulator is `cargo sim run -p seedlog-sim`");
    std::process::exit(2);
}
