//! The ten-billion run: build, verify and check a filter of `--items`
//! distinct synthetic URLs with the real `bloomgate` binary, in bounded
//! memory.
//!
//! 10¹⁰ URLs are 640 GB of text, which fits on no disk here, so the URLs are
//! generated in-process, deterministically, and streamed to `bloomgate build
//! --memory` and `bloomgate check --memory` through named pipes — once for
//! every pass the command makes over its input (it reopens the pipe per
//! pass, as it rereads a file). The filter is therefore built and checked by
//! exactly the code users run: canonicalization, the sliced builder, the
//! sliced check.
//!
//! ```text
//! cargo build --release -p bloomgate-cli -p bloomgate-bench
//! target/release/scale --items 1e8 --memory 120M --dir /tmp/scale        # rehearsal, minutes
//! target/release/scale --items 1e10 --memory 12G --dir /work/scale       # the real run
//! target/release/scale --items 1e10 --memory 12G --layout classic --dir /work/scale
//! ```
//!
//! Options: `--fp` (1e-4), `--negatives` (a tenth of `--items`, at least
//! 10⁶), `--bin` (the `bloomgate` binary; default beside this one), `--keep`
//! (keep the filter file). It prints one table row per phase: wall time,
//! lines per second, peak memory as the command reported it.
//!
//! Positives `i` and negatives `i` are disjoint by construction: the host of
//! a positive starts with `p`, a negative's with `n`, followed by `i` in base
//! 36, so every URL is distinct; the rest (label count, TLD, path depth and
//! length) varies with a hash of `i`, giving 20–64-byte URLs.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bloomgate_bench::num_arg;

const TLDS: [&str; 8] = ["com", "net", "org", "io", "de", "co.uk", "info", "ru"];
const ALNUM: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer: a bijection, so distinct inputs stay distinct.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

/// Appends URL number `i` of the positive (`p`) or negative (`n`) stream,
/// and a newline.
fn url(out: &mut Vec<u8>, marker: u8, i: u64) {
    let h = mix(i ^ ((marker as u64) << 56));
    out.extend_from_slice(if h & 1 == 0 { b"http://" } else { b"https://" });
    let start = out.len();
    if h >> 1 & 3 == 0 {
        out.extend_from_slice(b"www.");
    }
    out.push(marker);
    let mut digits = [0u8; 13];
    let mut n = i;
    let mut len = 0;
    loop {
        digits[len] = ALNUM[(n % 36) as usize];
        n /= 36;
        len += 1;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[..len].iter().rev());
    out.push(b'.');
    out.extend_from_slice(TLDS[(h >> 3 & 7) as usize].as_bytes());
    // Path up to a total of 20–64 bytes (scheme excluded from the count of
    // what the key keeps, included in the line).
    let target = 20 + (h >> 6) % 45;
    let mut r = h >> 12;
    out.push(b'/');
    while ((out.len() - start) as u64) < target {
        let c = ALNUM[(r % 36) as usize];
        r = (r / 36) ^ mix(r);
        out.push(if (out.len() - start).is_multiple_of(9) {
            b'/'
        } else {
            c
        });
    }
    out.push(b'\n');
}

/// Writes the stream `marker` (URLs 0..items) into the named pipe `fifo`
/// every time a reader opens it, until `done`.
fn feed(fifo: PathBuf, marker: u8, items: u64, done: Arc<AtomicBool>) -> u64 {
    let mut passes = 0;
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    while !done.load(Ordering::Relaxed) {
        // Non-blocking open fails (ENXIO) while no reader has the pipe open.
        // SAFETY: `c` is a valid NUL-terminated path; the flags are plain.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK) };
        if fd < 0 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        // SAFETY: `fd` was just opened by us and is owned by the File now.
        let file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // Back to blocking writes: the reader sets the pace.
        // SAFETY: fcntl on our own valid descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFL, 0) };
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        let mut buf = Vec::with_capacity(1 << 20);
        let mut ok = true;
        for i in 0..items {
            url(&mut buf, marker, i);
            if buf.len() >= (1 << 20) - 128 {
                if w.write_all(&buf).is_err() {
                    ok = false;
                    break;
                }
                buf.clear();
            }
        }
        if ok {
            ok = w.write_all(&buf).and_then(|()| w.flush()).is_ok();
        }
        if ok {
            // Close only once the reader has drained the pipe, so that its
            // next read is the end of this pass; then give it time to close
            // its end before the next open (a reopen while it still held
            // this pass's end would run two passes together).
            let file = w.into_inner().ok();
            if let Some(file) = &file {
                let fd = std::os::fd::AsRawFd::as_raw_fd(file);
                loop {
                    let mut queued: libc::c_int = 0;
                    // SAFETY: FIONREAD on our own pipe descriptor, into a c_int.
                    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
                    if r != 0 || queued == 0 {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
            drop(file);
            passes += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    passes
}

/// Runs `bloomgate` with a feeder on `fifo`; returns (wall seconds, stdout,
/// stderr, passes fed).
fn run_fed(
    bin: &Path,
    args: &[String],
    fifo: &Path,
    marker: u8,
    items: u64,
) -> (f64, String, String, u64) {
    let done = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (fifo, done) = (fifo.to_path_buf(), done.clone());
        std::thread::spawn(move || feed(fifo, marker, items, done))
    };
    let t = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bloomgate");
    let secs = t.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let passes = feeder.join().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprint!("{se}");
    assert!(
        out.status.success() || out.status.code() == Some(1),
        "{args:?} failed: {se}"
    );
    (secs, so, se, passes)
}

fn peak(stderr: &str) -> String {
    stderr
        .split("peak memory ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .unwrap_or("-")
        .to_string()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let items = num_arg(&args, "--items").unwrap_or(1e10) as u64;
    let fp = num_arg(&args, "--fp").unwrap_or(1e-4);
    let negatives = num_arg(&args, "--negatives")
        .map(|n| n as u64)
        .unwrap_or((items / 10).max(1_000_000));
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let memory = opt("--memory").unwrap_or_else(|| "12G".into());
    let layout = opt("--layout").unwrap_or_else(|| "blocked".into());
    let dir = PathBuf::from(opt("--dir").unwrap_or_else(|| "scale-run".into()));
    let bin = opt("--bin")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().unwrap().with_file_name("bloomgate"));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("urls.fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path; mode 0600.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let filter = dir.join(format!("scale-{layout}.bgf"));
    let _ = std::fs::remove_file(&filter);
    let f = filter.to_string_lossy().into_owned();
    let p = fifo.to_string_lossy().into_owned();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "scale: {items} URLs, {layout}, p = {fp}, --memory {memory}, {negatives} negatives; {cpu}, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut rows = Vec::new();

    let mut build = vec![
        "build".to_string(),
        "--keys".into(),
        "url".into(),
        "-n".into(),
        items.to_string(),
        "-p".into(),
        fp.to_string(),
        "--layout".into(),
        layout.clone(),
        "--memory".into(),
        memory.clone(),
        "-o".into(),
        f.clone(),
        p.clone(),
    ];
    if let Some(seed) = opt("--seed") {
        build.extend(["--seed".into(), seed]);
    }
    let (secs, _, err, passes) = run_fed(&bin, &build, &fifo, b'p', items);
    rows.push((
        "build",
        secs,
        items * passes,
        peak(&err),
        format!("{passes} passes"),
    ));
    let size = std::fs::metadata(&filter).map(|m| m.len()).unwrap_or(0);

    let t = Instant::now();
    let out = Command::new(&bin)
        .args(["info", "--verify", "--json", &f])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.push((
        "info --verify",
        t.elapsed().as_secs_f64(),
        0,
        "-".into(),
        format!("{size} bytes"),
    ));

    let check = |name: &str| {
        vec![
            "check".to_string(),
            "--count".into(),
            "--memory".into(),
            memory.clone(),
            f.clone(),
            name.to_string(),
        ]
    };
    let (secs, out, err, passes) = run_fed(&bin, &check(&p), &fifo, b'p', items);
    let hits: u64 = out.trim().parse().unwrap_or(0);
    let false_negatives = items - hits.min(items);
    rows.push((
        "check positives",
        secs,
        items * passes,
        peak(&err),
        format!("{hits} hits, {false_negatives} false negatives"),
    ));
    let (secs, out, err, passes) = run_fed(&bin, &check(&p), &fifo, b'n', negatives);
    let fps: u64 = out.trim().parse().unwrap_or(0);
    let measured = fps as f64 / negatives as f64;
    let predicted = info["predicted_fp"].as_f64().unwrap_or(f64::NAN);
    rows.push((
        "check negatives",
        secs,
        negatives * passes,
        peak(&err),
        format!(
            "{fps} false positives: {measured:.3e} measured, {predicted:.3e} predicted ({:+.1} %)",
            (measured / predicted - 1.0) * 100.0
        ),
    ));

    println!("\n| phase | wall | lines read | lines/s | peak memory | result |");
    println!("|---|---|---|---|---|---|");
    for (phase, secs, lines, peak, note) in &rows {
        println!(
            "| {phase} | {:.0} s ({:.1} min) | {lines} | {:.2} M | {peak} | {note} |",
            secs,
            secs / 60.0,
            *lines as f64 / secs / 1e6
        );
    }
    println!(
        "\nfile {} bytes ({:.1} GB), k = {}, zero false negatives: {}",
        size,
        size as f64 / 1e9,
        info["k"],
        false_negatives == 0
    );
    let _ = std::fs::remove_file(&fifo);
    if !args.iter().any(|a| a == "--keep") {
        let _ = std::fs::remove_file(&filter);
    }
    assert_eq!(false_negatives, 0, "false negatives");
}
