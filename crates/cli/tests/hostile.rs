//! Hostile files and careless invocations (issue 14): each test reproduces
//! one defect that an adversarial pass found, and fails on the code before
//! the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use qlinear::QuantizedFile;

mod support;
use support::{qlinear, refused, s};

/// A safetensors file from a raw header (JSON object text) and data bytes.
fn raw_file(path: &Path, header: &str, data: &[u8]) -> PathBuf {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

/// One F32 `[4, 8]` weight `l.weight` (and a bias), the simplest model to convert.
fn small_model(dir: &Path, name: &str) -> PathBuf {
    let w: Vec<u8> = (0..32).flat_map(|i| (i as f32 * 0.25 - 4.0).to_le_bytes()).collect();
    let b: Vec<u8> = (0..4).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut data = w;
    data.extend(b);
    raw_file(
        &dir.join(name),
        r#"{"__metadata__":{"z":"1","a":"2","m":"3"},"l.weight":{"dtype":"F32","shape":[4,8],"data_offsets":[0,128]},"l.bias":{"dtype":"F32","shape":[4],"data_offsets":[128,144]}}"#,
        &data,
    )
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// 1. Quadratic time.

/// 20 000 quantized tensors: validation (what `inspect` and per-tensor `load`
/// do) is linear. It took minutes before (the metadata map copied per load).
#[test]
fn twenty_thousand_tensors_validate_in_linear_time() {
    let mut header = String::from(r#"{"__metadata__":{"qlinear.format":"1""#);
    let mut tensors = String::new();
    let n = 20_000;
    for i in 0..n {
        header += &format!(r#","t{i}.qscheme":"q8","t{i}.in_features":"2""#);
        let o = i * 6;
        tensors += &format!(
            r#","t{i}.qweight":{{"dtype":"I8","shape":[1,2],"data_offsets":[{o},{}]}},"t{i}.scales":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}"#,
            o + 2,
            o + 2,
            o + 6
        );
    }
    header += "}";
    header += &tensors;
    header += "}";
    let mut data = vec![];
    for _ in 0..n {
        data.extend([1u8, 255]);
        data.extend(0.5f32.to_le_bytes());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = raw_file(&dir.path().join("many.safetensors"), &header, &data);
    let t = Instant::now();
    let o = qlinear(&["inspect", s(&path)]);
    let took = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("20000 quantized tensors, 0 invalid"));
    // generous for a debug build on a loaded machine: the quadratic reader took > 10 minutes
    assert!(
        took < Duration::from_secs(30),
        "inspect of 20 000 tensors took {took:?}"
    );
}

/// A header full of dangling `P.qscheme` keys is reported, quickly.
#[test]
fn dangling_qscheme_keys_are_reported_quickly() {
    let mut header = String::from(r#"{"__metadata__":{"qlinear.format":"1""#);
    for i in 0..20_000 {
        header += &format!(r#","dangling.{i:05}.qscheme":"q8""#);
    }
    header += "}}";
    let dir = tempfile::tempdir().unwrap();
    let path = raw_file(&dir.path().join("dangling.safetensors"), &header, &[]);
    let t = Instant::now();
    let f = QuantizedFile::open(&path).unwrap();
    let checked = f.validate();
    assert_eq!(checked.len(), 20_000);
    assert!(checked.iter().all(|(_, r)| r.is_err()));
    // the quadratic reader took minutes on this many keys
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

// 2 and 3. Panics and aborts on sizes.

#[test]
fn zero_column_weights_convert_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = raw_file(
        &d.join("zero.safetensors"),
        r#"{"w.weight":{"dtype":"F32","shape":[8,0],"data_offsets":[0,0]}}"#,
        &[],
    );
    for scheme in ["q4g32", "q4g18446744073709551614", "q8", "q4"] {
        let out = d.join(format!("{scheme}.safetensors"));
        let o = qlinear(&["convert", s(&input), s(&out), "--scheme", scheme]);
        assert_ne!(
            o.status.code(),
            Some(101),
            "panicked: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{scheme}: {}", String::from_utf8_lossy(&o.stderr));
        let f = QuantizedFile::open(&out).unwrap();
        assert!(f.validate().iter().all(|(_, r)| r.is_ok()));
    }
}

#[test]
fn sizes_too_large_for_this_machine_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (rows, want) in [
        (1u64 << 40, "too large for this machine"),
        (1u64 << 62, "too large for this machine"),
    ] {
        let input = raw_file(
            &d.join("huge.safetensors"),
            &format!(r#"{{"big.weight":{{"dtype":"F32","shape":[{rows},0],"data_offsets":[0,0]}}}}"#),
            &[],
        );
        let before = listing(d);
        let out = d.join("out.safetensors");
        let o = qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"]);
        refused(&o, &["big", want]);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("malformed"));
        assert_eq!(listing(d), before, "no output and no partial file left");
    }
}

// 4 and 5. The destination.

#[test]
fn the_input_is_never_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let original = std::fs::read(&input).unwrap();
    std::fs::hard_link(&input, d.join("hard.safetensors")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&input, d.join("soft.safetensors")).unwrap();
    let dotted = d.join(".").join("m.safetensors");
    for out in [
        input.clone(),
        dotted,
        d.join("hard.safetensors"),
        d.join("soft.safetensors"),
    ] {
        for force in [false, true] {
            let mut args = vec!["convert", s(&input), s(&out), "--scheme", "q8"];
            if force {
                args.push("--force");
            }
            let o = qlinear(&args);
            refused(&o, &["the input file"]);
        }
    }
    assert_eq!(std::fs::read(&input).unwrap(), original, "the input is untouched");
}

#[test]
fn an_existing_output_needs_force_and_must_be_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let out = d.join("out.safetensors");
    std::fs::write(&out, b"keep me").unwrap();
    refused(
        &qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"]),
        &["exists", "--force"],
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    assert!(qlinear(&["convert", s(&input), s(&out), "--scheme", "q8", "--force"])
        .status
        .success());
    assert!(QuantizedFile::open(&out)
        .unwrap()
        .validate()
        .iter()
        .all(|(_, r)| r.is_ok()));

    let sub = d.join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    refused(
        &qlinear(&["convert", s(&input), s(&sub), "--scheme", "q8", "--force"]),
        &["is a directory", "give the output file's path"],
    );
    // with a trailing slash, and without --force, the same
    let slash = format!("{}/", s(&sub));
    refused(
        &qlinear(&["convert", s(&input), &slash, "--scheme", "q8"]),
        &["is a directory"],
    );
    assert!(sub.is_dir() && std::fs::read_dir(&sub).unwrap().next().is_none());
    #[cfg(unix)]
    {
        let fifo = d.join("fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        refused(
            &qlinear(&["convert", s(&input), s(&fifo), "--scheme", "q8", "--force"]),
            &["is a FIFO, not a regular file"],
        );
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(),
            "the FIFO is still a FIFO"
        );
    }
}

/// An output in a folder that does not exist is refused by its own path
/// and folder (the message named the writer's temporary file, which the
/// user never gave, before), and nothing is created.
#[test]
fn an_output_in_a_missing_folder_is_refused_by_its_own_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let missing = d.join("no-such-folder");
    let out = missing.join("out.safetensors");
    let o = qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"]);
    refused(
        &o,
        &[
            &format!("{}: cannot create a file in its folder {}", s(&out), s(&missing)),
            "nothing was written",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("qlinear-partial"), "{err}");
    assert!(!missing.exists());
    assert_eq!(listing(d), ["m.safetensors"]);
}

/// A GGUF file where a safetensors file is read (`selftest --census`,
/// `convert --importance`) is named as GGUF in one line, not as a
/// malformed safetensors header.
#[test]
fn a_gguf_file_given_for_a_safetensors_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let gguf = d.join("model.gguf");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend([0u8; 16]);
    std::fs::write(&gguf, &bytes).unwrap();
    let want = format!("{}: a GGUF file, where a safetensors file is expected", s(&gguf));
    refused(&qlinear(&["selftest", "--census", s(&gguf)]), &[&want]);
    let out = d.join("out.safetensors");
    refused(
        &qlinear(&[
            "convert",
            s(&input),
            s(&out),
            "--scheme",
            "q4",
            "--recipe",
            "activation-aware",
            "--importance",
            s(&gguf),
        ]),
        &[&want],
    );
    assert!(!out.exists());
}

/// The library refuses a non-regular destination too (a character device
/// replaced by a regular file as root, before).
#[test]
#[cfg(unix)]
fn the_writer_never_replaces_a_device() {
    let e = qlinear::format::write_file(Path::new("/dev/null"), &Default::default(), vec![]).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
}

// 7. Never a file that inspect rejects.

#[test]
fn inputs_with_inconsistent_qlinear_tensors_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // GPTQ-style: l.qweight / l.scales without qlinear metadata
    let gptq = raw_file(
        &d.join("gptq.safetensors"),
        r#"{"l.qweight":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"l.scales":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"m.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[12,20]}}"#,
        &[0; 20],
    );
    let out = d.join("out.safetensors");
    refused(
        &qlinear(&["convert", s(&gptq), s(&out), "--scheme", "q8"]),
        &["do not validate"],
    );
    assert!(!out.exists());
    // stale P.qscheme metadata, P excluded
    let stale = raw_file(
        &d.join("stale.safetensors"),
        r#"{"__metadata__":{"p.qscheme":"q8","p.in_features":"2"},"p.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"m.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]}}"#,
        &[0; 16],
    );
    refused(
        &qlinear(&["convert", s(&stale), s(&out), "--scheme", "q8", "--exclude", "^p\\."]),
        &["do not validate"],
    );
    assert!(!out.exists());
}

// 8. Unclear errors on directories and FIFOs.

#[test]
fn a_directory_or_fifo_input_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.safetensors");
    refused(
        &qlinear(&["convert", s(d), s(&out), "--scheme", "q8"]),
        &["is a directory"],
    );
    refused(&qlinear(&["inspect", s(d)]), &["is a directory"]);
    #[cfg(unix)]
    {
        let fifo = d.join("in.fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let mut child = Command::new(env!("CARGO_BIN_EXE_qlinear"))
            .args(["inspect", s(&fifo)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                child.kill().unwrap();
                panic!("inspect hung on a FIFO");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(err.contains("a FIFO"), "{err}");
    }
}

// 9. Smaller defects.

#[test]
#[cfg(target_os = "linux")]
fn stale_partial_files_of_dead_processes_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let dead = d.join(".out.safetensors.qlinear-partial-4000000000-0");
    let alive = d.join(format!(".out.safetensors.qlinear-partial-{}-0", std::process::id()));
    let other = d.join(".other.safetensors.qlinear-partial-4000000000-0");
    for p in [&dead, &alive, &other] {
        std::fs::write(p, b"partial").unwrap();
    }
    let out = d.join("out.safetensors");
    assert!(qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"])
        .status
        .success());
    assert!(!dead.exists(), "a dead process's partial file is removed");
    assert!(alive.exists(), "a live process's partial file is left alone");
    assert!(other.exists(), "another output's partial file is left alone");
}

#[test]
#[cfg(unix)]
fn the_output_mode_follows_the_umask_or_the_existing_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    // what a plain create gives under this process's umask
    let probe = d.join("probe");
    std::fs::File::create(&probe).unwrap();
    let umasked = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
    let out = d.join("out.safetensors");
    assert!(qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"])
        .status
        .success());
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, umasked);
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(qlinear(&["convert", s(&input), s(&out), "--scheme", "q4", "--force"])
        .status
        .success());
    assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn the_same_input_gives_byte_identical_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let (a, b) = (d.join("a.safetensors"), d.join("b.safetensors"));
    for out in [&a, &b] {
        assert!(qlinear(&["convert", s(&input), s(out), "--scheme", "q4g4"])
            .status
            .success());
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn names_with_control_characters_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let evil = raw_file(
        &d.join("evil.safetensors"),
        "{\"x\\nforged line: ok\\u001b[2J.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}}",
        &[0; 8],
    );
    let out = d.join("out.safetensors");
    let o = qlinear(&["convert", s(&evil), s(&out), "--scheme", "q8"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = qlinear(&["inspect", s(&out)]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(!text.contains('\u{1b}'), "raw ESC printed: {text:?}");
    assert!(!text.lines().any(|l| l.starts_with("forged line")), "{text}");
    assert!(text.contains("x\\nforged line: ok\\u{1b}[2J"), "{text}");
}

#[test]
fn duplicate_tensor_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dup = raw_file(
        &dir.path().join("dup.safetensors"),
        r#"{"a.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},"a.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#,
        &[0; 8],
    );
    refused(
        &qlinear(&["inspect", s(&dup)]),
        &["a.weight", "names this tensor twice"],
    );
}

#[test]
fn weights_kept_unquantized_are_named_and_nothing_to_do_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = raw_file(
        &d.join("conv.safetensors"),
        r#"{"conv.weight":{"dtype":"F32","shape":[1,2,2],"data_offsets":[0,16]},"fc.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[16,24]}}"#,
        &[0; 24],
    );
    let out = d.join("out.safetensors");
    let o = qlinear(&["convert", s(&input), s(&out), "--scheme", "q8"]);
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("conv.weight") && text.contains("kept as it is"), "{text}");

    let only3d = raw_file(
        &d.join("only3d.safetensors"),
        r#"{"conv.weight":{"dtype":"F32","shape":[1,2,2],"data_offsets":[0,16]}}"#,
        &[0; 16],
    );
    let out2 = d.join("out2.safetensors");
    let o = qlinear(&["convert", s(&only3d), s(&out2), "--scheme", "q8"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to quantize"));
    assert!(!out2.exists());
}

// 6. Durability: the partial file is fsynced before the rename and the
// directory after it (seen through strace, which `cargo xtask test` installs).

#[test]
#[cfg(target_os = "linux")]
fn the_output_is_fsynced_before_and_after_the_rename() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = small_model(d, "m.safetensors");
    let out = d.join("out.safetensors");
    let trace = d.join("trace.txt");
    let status = Command::new("strace")
        .args(["-f", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o"])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_qlinear"))
        .args(["convert", s(&input), s(&out), "--scheme", "q8"])
        .stdout(Stdio::null())
        .status()
        .expect("strace runs (cargo xtask test installs it)");
    assert!(status.success());
    let calls: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .filter_map(|l| {
            ["fsync(", "fdatasync(", "rename"]
                .iter()
                .find(|c| l.contains(*c))
                .map(|c| c.trim_end_matches('(').to_string())
        })
        .collect();
    let rename = calls
        .iter()
        .position(|c| c.starts_with("rename"))
        .unwrap_or_else(|| panic!("no rename: {calls:?}"));
    assert!(
        calls[..rename].iter().any(|c| c.contains("sync")),
        "no fsync before the rename: {calls:?}"
    );
    assert!(
        calls[rename..].iter().any(|c| c.contains("sync")),
        "no fsync after the rename: {calls:?}"
    );
}
