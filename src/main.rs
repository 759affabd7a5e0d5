fn main() -> std::process::ExitCode {
    optimizer::cli::main()
}
