//! `cinch`: the command-line front end of the optimizer.

use std::process::ExitCode;

use cinch_optimizer::{COMMANDS, VERSION};

fn usage() -> String {
    let mut text = format!("cinch {VERSION}: deep-learning-aware GPU scheduling for Slurm\n\n");
    text.push_str("usage: cinch <command>\n\ncommands:\n");
    for (name, summary) in COMMANDS {
        text.push_str(&format!("  {name:<10} {summary}\n"));
    }
    text
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("version" | "--version" | "-V") => {
            println!("cinch {VERSION}");
            ExitCode::SUCCESS
        }
        Some("help" | "--help" | "-h") => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        None => {
            eprint!("{}", usage());
            ExitCode::from(2)
        }
        Some(other) => {
            eprintln!("cinch: unknown command '{other}'\n");
            eprint!("{}", usage());
            ExitCode::from(2)
        }
    }
}
