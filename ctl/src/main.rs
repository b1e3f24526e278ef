//! `ferrulectl`: the command-line client of `ferruled`'s control socket. The commands
//! live in the `ferrule_ctl` library, one module per subcommand.

fn main() -> std::process::ExitCode {
    ferrule_ctl::main()
}
