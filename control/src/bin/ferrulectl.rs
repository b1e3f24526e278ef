//! `ferrulectl`: the command-line client of `ferruled`'s control socket. The commands
//! live in `ferrule_control::ctl`.

fn main() -> std::process::ExitCode {
    ferrule_control::ctl::main()
}
