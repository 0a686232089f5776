use std::process::ExitCode;

fn main() -> ExitCode {
    voxtral_tts::cli::main()
}
