//! Stand-alone `bloomgate-server`: the same service as `bloomgate serve`,
//! for development and the integration tests.
//!
//! ```text
//! bloomgate-server --data-dir DIR [--http ADDR|off] [--resp ADDR|off]
//!                  [--token-file F] [--open-reads] [--ready-file F]
//!                  [--snapshot-secs N] [--idle-secs N] [--request-secs N]
//!                  [--max-connections N] [--threads N] [--resp-threads N]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use bloomgate_server::{run, ServeConfig};

fn usage() -> ExitCode {
    eprintln!("usage: bloomgate-server --data-dir DIR [--http ADDR|off] [--resp ADDR|off] [--token-file F] [--open-reads] [--ready-file F] [--snapshot-secs N] [--idle-secs N] [--request-secs N] [--max-connections N] [--threads N] [--resp-threads N]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut c = ServeConfig::default();
    let mut args = std::env::args().skip(1);
    let mut have_dir = false;
    while let Some(a) = args.next() {
        let mut val = || args.next();
        let ok = match a.as_str() {
            "--data-dir" => val().map(|v| {
                c.data_dir = v.into();
                have_dir = true;
            }),
            "--http" => val().and_then(|v| {
                if v == "off" {
                    c.http = None;
                    Some(())
                } else {
                    v.parse().ok().map(|a| c.http = Some(a))
                }
            }),
            "--resp" => val().and_then(|v| {
                if v == "off" {
                    c.resp = None;
                    Some(())
                } else {
                    v.parse().ok().map(|a| c.resp = Some(a))
                }
            }),
            "--token-file" => val().map(|v| c.token_file = Some(v.into())),
            "--open-reads" => {
                c.open_reads = true;
                Some(())
            }
            "--ready-file" => val().map(|v| c.ready_file = Some(v.into())),
            "--snapshot-secs" => val()
                .and_then(|v| v.parse().ok())
                .map(|s| c.snapshot_interval = Duration::from_secs(s)),
            "--idle-secs" => val()
                .and_then(|v| v.parse().ok())
                .map(|s| c.limits.idle_timeout = Duration::from_secs(s)),
            "--request-secs" => val()
                .and_then(|v| v.parse().ok())
                .map(|s| c.limits.request_timeout = Duration::from_secs(s)),
            "--max-connections" => val()
                .and_then(|v| v.parse().ok())
                .map(|n| c.limits.max_connections = n),
            "--threads" => val().and_then(|v| v.parse().ok()).map(|n| c.threads = n),
            "--resp-threads" => val()
                .and_then(|v| v.parse().ok())
                .map(|n| c.resp_threads = n),
            _ => None,
        };
        if ok.is_none() {
            eprintln!("bloomgate-server: bad argument '{a}'");
            return usage();
        }
    }
    if !have_dir {
        return usage();
    }
    match run(c) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bloomgate-server: {e}");
            ExitCode::FAILURE
        }
    }
}
