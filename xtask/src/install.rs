//! The installers: what a fresh machine lacks, installed before its first use (Python modules, rustup targets, Debian packages, the aarch64 cross tools and qemu, llama-cpp-python).

use super::*;

/// Makes sure `python3` can import the modules the interop checks need,
/// installing them with pip when missing.
pub(crate) fn ensure_python(modules: &[&str]) -> Result {
    let probe = format!("import {}", modules.join(", "));
    let ok = Command::new("python3")
        .args(["-c", &probe])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    run(Command::new("python3")
        .args(["-m", "pip", "install", "--quiet"])
        .args(modules))
}

/// Everything `test` uses, installed in one step before the first command
/// that needs any of it: the rustup targets, the aarch64 cross tools and qemu,
/// Node.js, Python's numpy and safetensors. A fresh machine goes through here
/// (CI removes the project's rustup targets first to prove it).
pub(crate) fn setup_test() -> Result {
    ensure_target(WASI)?;
    ensure_aarch64()?;
    // the convert durability test watches fsync and rename through strace
    if cfg!(target_os = "linux") && !have("strace") {
        apt_install(&["strace"])?;
    }
    if !have("node") {
        return Err("the wasm tests run under Node.js (>= 20): apt-get install nodejs".into());
    }
    // the GGUF reader's decoders are checked against the gguf package
    ensure_python(&["numpy", "safetensors", "gguf"])
}

/// The Python of a virtual environment under `target/` holding PyPI's
/// `llama-cpp-python` ([`LLAMA_CPP_PYTHON`], pinned) built from source with
/// the native CPU flags but without AMX ([`GGML_CFLAGS`]), installed on
/// first use (the build takes minutes, so never in CI) and again when the
/// venv was built with another version or other flags: both are kept
/// beside it.
pub(crate) fn llama_cpp_python() -> Result<PathBuf> {
    let venv = root().join(GGML_VENV);
    let python = venv.join("bin/python");
    let stamp = venv.join("qlinear-cflags");
    let built_with = std::fs::read_to_string(&stamp).unwrap_or_default();
    let wanted = format!("{LLAMA_CPP_PYTHON} {GGML_CFLAGS}");
    let probe = Command::new(&python).args(["-c", "import llama_cpp, numpy"]).status();
    if built_with != wanted || !probe.is_ok_and(|s| s.success()) {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(["--force-reinstall", "--no-cache-dir", LLAMA_CPP_PYTHON, "numpy"])
            .env("CMAKE_ARGS", "-DGGML_NATIVE=ON")
            .env("CFLAGS", GGML_CFLAGS)
            .env("CXXFLAGS", GGML_CFLAGS)
            .env("CMAKE_BUILD_PARALLEL_LEVEL", "2"))?;
        std::fs::write(&stamp, &wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    }
    Ok(python)
}

/// The sha256 of [`LLAMA_CPP_PYTHON`]'s source distribution on PyPI, whose
/// vendored llama.cpp [`llama_tools`] builds.
const LLAMA_CPP_PYTHON_SDIST_SHA256: &str = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e";

/// The CMake that builds [`llama_tools`] (a PyPI wheel, into the venv).
const CMAKE: &str = "cmake==3.31.6";

/// `llama-imatrix` and `llama-quantize`, built (once) from the llama.cpp
/// sources that [`LLAMA_CPP_PYTHON`]'s own source distribution ships
/// (`vendor/llama.cpp`), so the importance matrix and the quantized files
/// are the very llama.cpp the rows are run by: the sdist fetched from
/// PyPI's simple index and checked against its pinned sha256, CMake from
/// PyPI into the venv, the same `-march=native` and [`GGML_CFLAGS`] as the
/// Python package. Returns the two binaries' paths.
pub(crate) fn llama_tools() -> Result<(PathBuf, PathBuf)> {
    let python = llama_cpp_python()?;
    let dir = root().join("target/llama-tools");
    let bin = dir.join("build/bin");
    let (imatrix, quantize) = (bin.join("llama-imatrix"), bin.join("llama-quantize"));
    let stamp = dir.join("qlinear-built");
    let wanted = format!("{LLAMA_CPP_PYTHON} {LLAMA_CPP_PYTHON_SDIST_SHA256} {GGML_CFLAGS}");
    if std::fs::read_to_string(&stamp).unwrap_or_default() == wanted && imatrix.exists() && quantize.exists() {
        return Ok((imatrix, quantize));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", CMAKE]))?;
    // the sdist's address from the simple index (PEP 503), its bytes
    // checked against the pinned digest before anything is unpacked
    let version = LLAMA_CPP_PYTHON.rsplit("==").next().unwrap_or_default();
    run(Command::new(&python)
        .args([
            "-c",
            "import hashlib, re, sys, tarfile, urllib.request\n\
             name, version, digest, dest = sys.argv[1:5]\n\
             page = urllib.request.urlopen(f'https://pypi.org/simple/{name}/').read().decode()\n\
             sdist = f'llama_cpp_python-{version}.tar.gz'\n\
             url = next(u for u in re.findall(r'href=\"([^\"]+)\"', page) if u.split('#')[0].endswith('/' + sdist))\n\
             data = urllib.request.urlopen(url.split('#')[0]).read()\n\
             got = hashlib.sha256(data).hexdigest()\n\
             if got != digest: sys.exit(f'{sdist}: sha256 {got}, not the pinned {digest}')\n\
             open(f'{dest}/{sdist}', 'wb').write(data)\n\
             tarfile.open(f'{dest}/{sdist}').extractall(dest, filter='data')",
            "llama-cpp-python",
            version,
            LLAMA_CPP_PYTHON_SDIST_SHA256,
        ])
        .arg(&dir))?;
    let source = dir.join(format!("llama_cpp_python-{version}/vendor/llama.cpp"));
    let venv_bin = root().join(GGML_VENV).join("bin");
    let path = format!("{}:{}", venv_bin.display(), std::env::var("PATH").unwrap_or_default());
    run(Command::new(venv_bin.join("cmake"))
        .env("PATH", &path)
        .arg("-S")
        .arg(&source)
        .arg("-B")
        .arg(dir.join("build"))
        .args([
            "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_NATIVE=ON",
            "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_SERVER=OFF",
            "-DLLAMA_BUILD_TOOLS=ON",
            "-DBUILD_SHARED_LIBS=OFF",
        ])
        .arg(format!("-DCMAKE_C_FLAGS={GGML_CFLAGS}"))
        .arg(format!("-DCMAKE_CXX_FLAGS={GGML_CFLAGS}"))
        .stdout(std::process::Stdio::null()))?;
    run(Command::new(venv_bin.join("cmake"))
        .env("PATH", &path)
        .arg("--build")
        .arg(dir.join("build"))
        .args(["--target", "llama-imatrix", "llama-quantize", "-j", "2"])
        .stdout(std::process::Stdio::null()))?;
    std::fs::write(&stamp, &wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok((imatrix, quantize))
}

/// The llama.cpp peer: the one version every llama.cpp row names (its
/// system info is printed beside it).
pub(crate) const LLAMA_CPP_PYTHON: &str = "llama-cpp-python==0.3.36";

/// The compiler flags llama.cpp is built with beside `-march=native`:
/// AMX off. On an Intel Xeon with AMX (family 6 model 167) the native
/// build's AMX matrix multiply crashed in every batch of more than one
/// token (`ggml_backend_amx_mul_mat`, SIGSEGV, llama-cpp-python 0.3.36;
/// llama.cpp issue 20824, closed without a fix), so the peer runs its
/// AVX-512 VNNI kernels there, as on every other CPU. GCC's explicit
/// `-mno-*` flags win over `-march=native` wherever they stand; on a CPU
/// without AMX they change nothing.
pub(crate) const GGML_CFLAGS: &str = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/// The virtual environment `--ggml` installs `llama-cpp-python` into.
pub(crate) const GGML_VENV: &str = "target/ggml-venv";

pub(crate) const AARCH64: &str = "aarch64-unknown-linux-gnu";

pub(crate) const QEMU: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";

/// Adds a rustup target when it is not installed yet.
pub(crate) fn ensure_target(target: &str) -> Result {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("rustup: {e}"))?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == target)
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", target]))
}

pub(crate) fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs Debian packages (as root, with apt-get), or stops with the
/// command to run.
pub(crate) fn apt_install(packages: &[&str]) -> Result {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if have("apt-get") && root {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))
    } else {
        Err(format!(
            "install these Debian packages first: apt-get install {}",
            packages.join(" ")
        ))
    }
}

/// Installs what the aarch64 cross tests need when it is missing: the rustup
/// target, and on Debian (as root) qemu-user and the aarch64 cross gcc/libc.
/// Otherwise stops with exactly what to install.
pub(crate) fn ensure_aarch64() -> Result {
    ensure_target(AARCH64)?;
    if have("qemu-aarch64") && have("aarch64-linux-gnu-gcc") && Path::new("/usr/aarch64-linux-gnu/lib").exists() {
        return Ok(());
    }
    apt_install(&["qemu-user", "gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"])
}

pub(crate) const WASI: &str = "wasm32-wasip1";
