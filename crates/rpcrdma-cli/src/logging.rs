//! The tool's log: `tracing` events of the libraries on standard error
//! (never standard output, where `--json` goes), filtered by `RUST_LOG`
//! when it is set (e.g. `RUST_LOG=rpcrdma=debug`), else by `-v` / `-q`.

use tracing_subscriber::EnvFilter;

/// The level without `RUST_LOG`: `base` (info for serving commands, warn
/// for the others) raised by each `-v` (debug, trace) or lowered by `-q`
/// (error; `-qq`: off).
pub fn level(base_info: bool, verbose: u8, quiet: u8) -> &'static str {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let base: i32 = if base_info { 3 } else { 2 };
    let l = (base + i32::from(verbose) - i32::from(quiet)).clamp(0, 5);
    LEVELS[l as usize]
}

/// Installs the subscriber (once, at start).
pub fn init(base_info: bool, verbose: u8, quiet: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => EnvFilter::try_new(v).unwrap_or_else(|e| {
            eprintln!("rpcrdma: RUST_LOG ignored: {e}");
            EnvFilter::new(level(base_info, verbose, quiet))
        }),
        _ => EnvFilter::new(level(base_info, verbose, quiet)),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true)
        .try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn levels() {
        assert_eq!(super::level(true, 0, 0), "info");
        assert_eq!(super::level(false, 0, 0), "warn");
        assert_eq!(super::level(false, 1, 0), "info");
        assert_eq!(super::level(false, 2, 0), "debug");
        assert_eq!(super::level(true, 9, 0), "trace");
        assert_eq!(super::level(true, 0, 1), "warn");
        assert_eq!(super::level(false, 0, 1), "error");
        assert_eq!(super::level(false, 0, 5), "off");
    }
}
