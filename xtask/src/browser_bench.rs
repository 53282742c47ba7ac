//! `cargo xtask browser --bench [--wllama]`: SmolLM2 in the page beside
//! the native binary and wllama, alternated.

use std::sync::mpsc;

use super::browser::{build_page, native_binaries, open_page, percent, read_json};
use super::server::{start, Site};
use super::*;

/// The configurations `browser --bench` times, as `cargo xtask smollm`
/// converts them into `target/smollm` (file stem, mode), each with the GGUF
/// file of llama.cpp's type it is compared with at matched accuracy: the q8
/// rotated W8A8 file with Q8_0, the q4g32 GPTQ-rotated W4A8 file with Q4_0
/// (both GGUFs made from the shipped one by `tools/gguf_fixtures.py`).
const BENCHED: [(&str, &str, &str); 2] = [
    ("q8-rotated", "W8A8", "SmolLM2-135M-Instruct.Q8_0.gguf"),
    ("q4g32-gptq", "W4A8", "SmolLM2-135M-Instruct.Q4_0.gguf"),
];

/// The browser peer, pinned: npm's `@wllama/wllama` (llama.cpp compiled to
/// WebAssembly with SIMD128 and pthreads).
const WLLAMA: &str = "3.8.1";

/// Installs [`WLLAMA`] with npm into `target/wllama` when it is missing or
/// another version; returns the folder of its ES module build.
fn ensure_wllama() -> Result<PathBuf> {
    let dir = root().join("target/wllama");
    let package = dir.join("node_modules/@wllama/wllama");
    let installed = read_json(&package.join("package.json")).unwrap_or_default();
    if installed["version"].as_str() != Some(WLLAMA) {
        if !have("npm") {
            apt_install(&["npm"])?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        run(Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("@wllama/wllama@{WLLAMA}")))?;
    }
    Ok(package.join("esm"))
}

/// What one round measured of one configuration at one thread count:
/// prefill and decode tok/s in the page, natively, and of wllama (zeros
/// where not measured).
#[derive(Clone, Copy, Default)]
struct Round {
    page: (f64, f64),
    native: (f64, f64),
    wllama: (f64, f64),
}

/// `target/smollm/STEM.safetensors`.
fn file(stem: &str) -> PathBuf {
    root().join(format!("target/smollm/{stem}.safetensors"))
}

/// `cargo xtask browser --bench [--wllama] [--repeat R]`: SmolLM2's prefill
/// of 128 tokens of GPL-3 and 128 greedy decode steps in the page (the
/// widest build at 1 thread, its threaded build at 2) and in the native
/// `qlinear-smollm --bench` on the same tokens, and with `--wllama` in
/// wllama (pinned [`WLLAMA`], its thread mode checked every row) on the
/// GGUF each file is compared with; R rounds (default 3) in which qlinear
/// (native, then the page) and wllama alternate (qlinear first in even
/// rounds), each page run after an untimed warm-up. Prints medians, ranges
/// and the ratios per round; the round files are kept in
/// `target/browser-bench/`, the rows in `target/browser-bench.json`. Needs
/// the files `cargo xtask smollm` makes. Not in CI.
pub(crate) fn browser_bench(args: &[String]) -> Result {
    let repeat = repeat_arg(args);
    let with_wllama = args.iter().any(|a| a == "--wllama");
    let dir = root().join("target/smollm");
    if with_wllama && dir.join("SmolLM2-135M-Instruct.Q4_0.gguf").exists() {
        // `cargo xtask smollm` makes the Q4_0 file; the Q8_0 one only for
        // llama.cpp's rows, so here when missing
        q8_0_gguf(&smollm2_gguf()?)?;
    }
    for (f, _, gguf) in BENCHED {
        for path in [file(f), dir.join(gguf)] {
            if !path.exists() && (with_wllama || path.extension().is_some_and(|e| e == "safetensors")) {
                return Err(format!(
                    "{}: missing; run cargo xtask smollm first: it makes the files timed here",
                    path.display()
                ));
            }
        }
    }
    if !have("chromium") {
        apt_install(&["chromium"])?;
    }
    let builds = build_page()?;
    let (_, smollm) = native_binaries()?;
    let folders = if with_wllama {
        vec![("wllama".to_string(), ensure_wllama()?)]
    } else {
        vec![]
    };
    let out = root().join("target/browser-bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let widest = |threads: bool| builds.iter().rfind(|b| b.threads == threads).map(|b| b.name.clone());
    let (plain, threaded) = (widest(false).unwrap_or_default(), widest(true).unwrap_or_default());
    let mut models: Vec<(String, PathBuf)> = BENCHED.iter().map(|(f, _, _)| (f.to_string(), file(f))).collect();
    models.extend(BENCHED.iter().map(|(_, _, g)| (g.to_string(), dir.join(g))));
    let (tx, rx) = mpsc::channel();
    let port = start(Site {
        web: root().join("web"),
        builds,
        models,
        folders,
        results: Some(tx),
    })?;
    let mut b = Bench {
        port,
        rx,
        plain,
        threaded,
        ids: String::new(),
        text: String::new(),
        rounds: vec![vec![]; BENCHED.len() * 2],
        memory: vec![0.0; BENCHED.len()],
        peer: String::new(),
    };
    for r in 0..repeat {
        for slot in &mut b.rounds {
            slot.push(Round::default());
        }
        let mut kept = vec![];
        // qlinear first in even rounds (round 0 also gives the prompt's ids)
        let order: &[bool] = if r % 2 == 0 { &[true, false] } else { &[false, true] };
        for &qlinear in order {
            if qlinear {
                b.native(&smollm, &out.join(format!("native-{r}.json")))?;
            }
            for (c, threads) in (0..BENCHED.len()).flat_map(|c| [(c, 1usize), (c, 2)]) {
                if qlinear {
                    kept.push(b.page(c, threads)?);
                } else if with_wllama {
                    kept.push(b.wllama(c, threads)?);
                }
            }
        }
        let path = out.join(format!("round-{r}.json"));
        std::fs::write(&path, serde_json::Value::from(kept).to_string())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    report_bench(&b.rounds, &b.memory, &b.peer)
}

/// A bench in progress: the server's port and results, the builds the page
/// runs, the prompt (ids and text), and what the rounds measured.
struct Bench {
    port: u16,
    rx: mpsc::Receiver<String>,
    plain: String,
    threaded: String,
    ids: String,
    text: String,
    /// By configuration × thread count (`2c + (threads == 2)`), one a round.
    rounds: Vec<Vec<Round>>,
    /// The page's wasm memory over the file, by configuration (the largest).
    memory: Vec<f64>,
    /// wllama's version line, once it has run.
    peer: String,
}

impl Bench {
    /// This round's slot of configuration `c` at `threads`.
    fn slot(&mut self, c: usize, threads: usize) -> &mut Round {
        let slots = &mut self.rounds[2 * c + usize::from(threads == 2)];
        slots.last_mut().expect("a round was pushed")
    }

    /// The native bench of every configuration at 1 and 2 threads, one
    /// round, its rows to `json` (and, the first time, the prompt's ids and
    /// text from beside it).
    fn native(&mut self, smollm: &Path, json: &Path) -> Result {
        run(Command::new(smollm)
            .args(BENCHED.iter().map(|(f, m, _)| format!("{}@{m}", file(f).display())))
            .args(["--bench", "/usr/share/common-licenses/GPL-3"])
            .args(["--bench-threads", "1,2", "--repeat", "1", "--json"])
            .arg(json)
            .stdout(std::process::Stdio::null()))?;
        if self.ids.is_empty() {
            let read = |ext: &str| std::fs::read_to_string(json.with_extension(ext)).map_err(|e| e.to_string());
            (self.ids, self.text) = (read("prompt")?, read("prompt.txt")?);
        }
        for row in read_json(json)?.as_array().into_iter().flatten() {
            let model = row["model"].as_str().unwrap_or("");
            let Some(c) = BENCHED
                .iter()
                .position(|(f, m, _)| model.ends_with(&format!("{f}.safetensors@{m}")))
            else {
                continue;
            };
            let threads = if row["threads"].as_u64() == Some(2) { 2 } else { 1 };
            self.slot(c, threads).native = (
                row["prefill_tok_s"]["median"].as_f64().unwrap_or(0.0),
                row["decode_tok_s"]["median"].as_f64().unwrap_or(0.0),
            );
        }
        Ok(())
    }

    /// Configuration `c` in the page at `threads`; returns the page's
    /// result for the round file.
    fn page(&mut self, c: usize, threads: usize) -> Result<serde_json::Value> {
        let (f, mode, _) = BENCHED[c];
        let build = if threads == 1 { &self.plain } else { &self.threaded };
        let url = format!(
            "http://127.0.0.1:{}/index.html?bench=/model/{f}&modes={mode}&ids={}&tokens=128&threads={threads}&build={build}",
            self.port, self.ids
        );
        let page = self.open(&url, &format!("{f}@{mode}"), threads)?;
        let run = &page["runs"][0];
        let bytes = std::fs::metadata(file(f)).map(|m| m.len() as f64).unwrap_or(1.0);
        self.memory[c] = self.memory[c].max(page["memory_bytes"].as_f64().unwrap_or(0.0) / bytes);
        self.slot(c, threads).page = (
            run["prefill_tok_s"].as_f64().unwrap_or(0.0),
            run["decode_tok_s"].as_f64().unwrap_or(0.0),
        );
        Ok(serde_json::json!({"who": format!("{f}@{mode}"), "threads": threads, "result": page}))
    }

    /// wllama on configuration `c`'s GGUF at `threads`, its thread mode and
    /// token counts checked; returns its result for the round file.
    fn wllama(&mut self, c: usize, threads: usize) -> Result<serde_json::Value> {
        let gguf = BENCHED[c].2;
        let url = format!(
            "http://127.0.0.1:{}/wllama.html?model=/model/{gguf}&text={}&tokens=128&threads={threads}",
            self.port,
            percent(&self.text)
        );
        let who = format!("wllama {gguf}");
        let page = self.open(&url, &who, threads)?;
        let (mt, n) = (page["multithread"].as_bool(), page["threads"].as_u64());
        if n != Some(threads as u64) || (threads > 1 && mt != Some(true)) {
            return Err(format!(
                "{who} ran {n:?} threads (multi-thread build: {mt:?}) where {threads} were asked"
            ));
        }
        let tm = &page["timings"];
        if tm["prompt_n"].as_u64() != Some(128) || tm["predicted_n"].as_u64() != Some(128) {
            return Err(format!(
                "{who}: timed {} prompt and {} generated tokens, not 128 and 128",
                tm["prompt_n"], tm["predicted_n"]
            ));
        }
        self.peer = format!(
            "wllama {WLLAMA} (libllama {})",
            page["libllama"].as_str().unwrap_or("?")
        );
        self.slot(c, threads).wllama = (
            tm["prompt_per_second"].as_f64().unwrap_or(0.0),
            tm["predicted_per_second"].as_f64().unwrap_or(0.0),
        );
        Ok(serde_json::json!({"who": who, "threads": threads, "result": page}))
    }

    /// Opens `url` and returns the page's result, or its error (with the
    /// stack a failing peer sends) naming `who`.
    fn open(&self, url: &str, who: &str, threads: usize) -> Result<serde_json::Value> {
        let page = open_page(url, &self.rx)?;
        match page["error"].as_str() {
            Some(e) => Err(format!(
                "{who} at {threads} threads in the page: {e}\n{}",
                page["stack"].as_str().unwrap_or("")
            )),
            None => Ok(page),
        }
    }
}

/// `browser --bench`'s rows into `target/browser-bench.json`, then their
/// table ([`bench_table`]).
fn report_bench(rounds: &[Vec<Round>], memory: &[f64], wllama: &str) -> Result {
    let chromium = Command::new("chromium")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = qlinear_dispatch::cpu_model();
    // each file's perplexity, where `cargo xtask smollm` scored it
    let eval = read_json(&root().join("target/smollm-eval.json")).unwrap_or_default();
    let perplexity = |f: &str, mode: &str| {
        eval.as_array()
            .into_iter()
            .flatten()
            .find(|r| {
                r["model"]
                    .as_str()
                    .is_some_and(|m| m.ends_with(&format!("{f}.safetensors@{mode}")))
            })
            .and_then(|r| r["perplexity"].as_f64())
    };
    let mut json = vec![];
    for (c, (f, mode, gguf)) in BENCHED.iter().enumerate() {
        for (t, threads) in [1usize, 2].into_iter().enumerate() {
            let rs = &rounds[2 * c + t];
            let col = |g: &dyn Fn(&Round) -> f64| spread(rs.iter().map(g).collect());
            let round_rows: Vec<serde_json::Value> = rs
                .iter()
                .map(|r| serde_json::json!({"page": [r.page.0, r.page.1], "native": [r.native.0, r.native.1], "wllama": [r.wllama.0, r.wllama.1]}))
                .collect();
            json.push(serde_json::json!({
                "model": format!("{f}@{mode}"), "perplexity": perplexity(f, mode), "threads": threads, "cpu": cpu,
                "chromium": chromium, "peer": wllama, "peer_file": gguf, "rounds": round_rows,
                "page_prefill_tok_s": col(&|r| r.page.0), "page_decode_tok_s": col(&|r| r.page.1),
                "native_decode_tok_s": col(&|r| r.native.1), "wllama_prefill_tok_s": col(&|r| r.wllama.0),
                "wllama_decode_tok_s": col(&|r| r.wllama.1), "wasm_memory_over_file": memory[c],
            }));
        }
    }
    let path = root().join("target/browser-bench.json");
    std::fs::write(&path, serde_json::Value::from(json.clone()).to_string())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{}", bench_table(&json)?);
    Ok(())
}

/// The table `browser --bench` prints, from its rows
/// (`target/browser-bench.json`, kept beside the round files under
/// `docs/benchmarks/runs/`): each row's medians and ranges recomputed from
/// its per-round tok/s, and the per-round ratios. `cargo xtask browser
/// --table FILE` prints it for a kept file, and `cargo xtask test` checks a
/// kept `browser-table.md` against it.
pub(crate) fn bench_table(rows: &[serde_json::Value]) -> Result<String> {
    let first = rows.first().ok_or("no rows")?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    let peer = text(&first["peer"]);
    let mut out = format!(
        "{}; {}; {}; {} rounds alternated; prompt 128 tokens of GPL-3, 128 decoded\n",
        text(&first["cpu"]),
        text(&first["chromium"]),
        if peer.is_empty() { "no wllama" } else { &peer },
        first["rounds"].as_array().map_or(0, Vec::len)
    );
    out += "| model (perplexity) | threads | page prefill tok/s | page decode tok/s | native decode tok/s | page ÷ native decode | \
            wllama file | wllama prefill tok/s | wllama decode tok/s | page ÷ wllama decode | page ÷ wllama prefill | wasm memory ÷ file |\n";
    out += "|---|--:|--:|--:|--:|---|---|--:|--:|---|---|--:|\n";
    let fmt = |s: (f64, f64, f64)| format!("{:.1} ({:.1}–{:.1})", s.0, s.1, s.2);
    for row in rows {
        let rs: Vec<Round> = row["rounds"]
            .as_array()
            .ok_or_else(|| format!("{}: no rounds", row["model"]))?
            .iter()
            .map(|r| {
                let pair = |k: &str| (r[k][0].as_f64().unwrap_or(0.0), r[k][1].as_f64().unwrap_or(0.0));
                Round {
                    page: pair("page"),
                    native: pair("native"),
                    wllama: pair("wllama"),
                }
            })
            .collect();
        let col = |g: &dyn Fn(&Round) -> f64| fmt(spread(rs.iter().map(g).collect()));
        let per_round =
            |f: &dyn Fn(&Round) -> f64| rs.iter().map(|r| format!("{:.2}", f(r))).collect::<Vec<_>>().join(", ");
        // a run without --wllama has no peer columns to fill
        let peer_col = |v: String| if peer.is_empty() { "—".to_string() } else { v };
        out += &format!(
            "| {} ({}) | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} |\n",
            text(&row["model"]),
            row["perplexity"]
                .as_f64()
                .map_or("not scored".into(), |p| format!("{p:.4}")),
            row["threads"],
            col(&|r| r.page.0),
            col(&|r| r.page.1),
            col(&|r| r.native.1),
            per_round(&|r| r.page.1 / r.native.1),
            peer_col(text(&row["peer_file"])),
            peer_col(col(&|r| r.wllama.0)),
            peer_col(col(&|r| r.wllama.1)),
            peer_col(per_round(&|r| r.page.1 / r.wllama.1)),
            peer_col(per_round(&|r| r.page.0 / r.wllama.0)),
            row["wasm_memory_over_file"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(out)
}

/// `cargo xtask browser --table FILE`: [`bench_table`] of a kept
/// `browser-bench.json`.
pub(crate) fn browser_table(args: &[String]) -> Result {
    let path = args
        .first()
        .ok_or("usage: cargo xtask browser --table FILE (a browser-bench.json)")?;
    let rows = read_json(Path::new(path))?;
    print!(
        "{}",
        bench_table(rows.as_array().ok_or_else(|| format!("{path}: not an array of rows"))?)?
    );
    Ok(())
}

/// The median, least and greatest of `v` (zeros when empty).
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}
