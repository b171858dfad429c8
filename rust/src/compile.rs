//! Compiling kernels without a GPU: cuTile-rs's `KernelCompiler` emits Tile IR bytecode from the
//! kernel's AST with no driver, and the pinned `tileiras` assembles it to a cubin for any supported
//! architecture on the CPU. `cargo test` uses this to prove every kernel compiles for sm_90.
//!
//! The module compiled here is the one a launch compiles: same generics, same stride hints, same
//! compile options (OCC / W hints) and the same specialisation bits. cuTile-rs computes those bits at
//! launch from each borrowed tensor (`compute_spec(ptr, shape, strides)`: divisibility of extents and
//! strides, capped at 16, and of the base address); here they come from the same views (`ArgView`)
//! with a 256-byte aligned base address, which is what torch's allocator hands out for a fresh
//! contiguous tensor. Without them every global access compiles to scalar 16-bit loads and no TMA,
//! i.e. not the kernel that runs (bench/GAPS.md section 0).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::process::Command;

use cutile::compile_api::KernelCompiler;
use cutile::tensor::{compute_spec, SpecializationBits};

use crate::args::DType;
use crate::ops::KernelSpec;

/// The base address assumed for every tensor in compile-only builds (divisible by 16, the cap of
/// cuTile-rs's divisibility hints, like every torch CUDA allocation).
pub const ASSUMED_BASE_PTR: u64 = 1 << 20;

/// The specialisation bits a launch computes for each tensor argument of `spec`.
pub fn spec_bits(spec: &KernelSpec, dtype: DType) -> Vec<(&'static str, SpecializationBits)> {
    spec.args
        .iter()
        .map(|a| {
            // Workspace views (ArgView::workspace) are fp32 scratch memory, whatever the request's dtype.
            let size = a.elem_size(dtype);
            let ptr = ASSUMED_BASE_PTR + (a.offset as u64) * size as u64;
            (a.name, compute_spec(ptr, &a.shape, &a.strides, size as i32))
        })
        .collect()
}

/// Tile IR bytecode of one specialisation for `arch` (e.g. "sm_90").
pub fn bytecode(spec: &KernelSpec, dtype: DType, arch: &str) -> Result<Vec<u8>, String> {
    let hints: Vec<(&str, Vec<i32>)> = spec.args.iter().map(|a| (a.name, a.stride_hint())).collect();
    let strides: Vec<(&str, &[i32])> = hints.iter().map(|(n, s)| (*n, s.as_slice())).collect();
    let bits = spec_bits(spec, dtype);
    let artifacts = KernelCompiler::new(spec.ast, spec.module, spec.function)
        .generics(spec.generics.clone())
        .strides(&strides)
        .spec_args(&bits)
        .options(spec.options.clone())
        .target(arch)
        .compile()
        .map_err(|e| format!("{}::{}{:?}: Tile IR generation failed: {e}", spec.module, spec.function, spec.generics))?;
    artifacts
        .bytecode()
        .map_err(|e| format!("{}::{}{:?}: bytecode serialisation failed: {e}", spec.module, spec.function, spec.generics))
}

/// The tileiras cuTile-rs would use: CUTILE_TILEIRAS_PATH, else CUDA_TOOLKIT_PATH/bin, else PATH.
pub fn find_tileiras() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUTILE_TILEIRAS_PATH") {
        return Some(PathBuf::from(p));
    }
    if let Some(root) = std::env::var_os("CUDA_TOOLKIT_PATH") {
        let p = PathBuf::from(root).join("bin").join("tileiras");
        if p.exists() {
            return Some(p);
        }
    }
    std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("tileiras")).find(|p| p.exists()))
}

/// Assembles bytecode to a cubin with tileiras; returns the cubin's size in bytes.
pub fn assemble(bytecode: &[u8], arch: &str, tag: &str) -> Result<usize, String> {
    assemble_cubin(bytecode, arch, tag).map(|c| c.len())
}

fn scratch_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("tilerosetta-cutile-rs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// A scratch file of its own for one call: `{tag}.{n}.{ext}`. The tag names the kernel, not the call, and
/// threads of one process (cargo's parallel tests) compile and dump the same kernel under different
/// configurations at once; a file named by the tag alone was overwritten or removed under another call.
fn scratch_file(tag: &str, ext: &str) -> Result<PathBuf, String> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    Ok(scratch_dir()?.join(format!("{tag}.{n}.{ext}")))
}

/// Assembles bytecode to a cubin with tileiras; returns the cubin.
pub fn assemble_cubin(bytecode: &[u8], arch: &str, tag: &str) -> Result<Vec<u8>, String> {
    let tileiras = find_tileiras().ok_or("tileiras not found (set CUTILE_TILEIRAS_PATH)")?;
    let input = scratch_file(tag, "tilebc")?;
    let output = input.with_extension("cubin");
    std::fs::write(&input, bytecode).map_err(|e| e.to_string())?;
    let run = Command::new(&tileiras)
        .arg(format!("--gpu-name={arch}"))
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .env_remove("CUDA_HOME") // an older toolkit's ptxas breaks tileiras 13.4
        .output()
        .map_err(|e| format!("running {}: {e}", tileiras.display()))?;
    if !run.status.success() {
        // The bytecode stays for a rerun by hand (tileiras --remarks=all names little more than its exit).
        return Err(format!(
            "{tag}: tileiras --gpu-name={arch} failed ({}): {} (input kept: {})",
            run.status,
            String::from_utf8_lossy(&run.stderr),
            input.display()
        ));
    }
    let _ = std::fs::remove_file(&input);
    let cubin = std::fs::read(&output).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&output);
    Ok(cubin)
}

/// A cuobjdump that can read sm_90 cubins: $CUOBJDUMP, else PATH, else the one Triton's wheel bundles
/// in this repository's .venv (the pinned toolchain has none).
pub fn find_cuobjdump() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUOBJDUMP") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("cuobjdump")).find(|p| p.exists()))
    {
        return Some(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(".venv").join("lib");
    std::fs::read_dir(&root).ok()?.flatten().find_map(|py| {
        let p = py.path().join("site-packages/triton/backends/nvidia/bin/cuobjdump");
        p.exists().then_some(p)
    })
}

/// Runs cuobjdump with `flags` (e.g. "-sass", "--dump-resource-usage", "-elf") on a cubin.
pub fn cuobjdump(cubin: &[u8], flags: &[&str], tag: &str) -> Result<String, String> {
    let tool = find_cuobjdump().ok_or("cuobjdump not found (set CUOBJDUMP, or pip install triton into .venv)")?;
    let path = scratch_file(tag, "dump.cubin")?;
    std::fs::write(&path, cubin).map_err(|e| e.to_string())?;
    let run = Command::new(&tool).args(flags).arg(&path).output().map_err(|e| format!("running {}: {e}", tool.display()));
    let _ = std::fs::remove_file(&path);
    let run = run?;
    if !run.status.success() {
        return Err(format!("{tag}: {} {flags:?} failed ({}): {}", tool.display(), run.status, String::from_utf8_lossy(&run.stderr)));
    }
    Ok(String::from_utf8_lossy(&run.stdout).into_owned())
}

/// What `cuobjdump --dump-resource-usage` and `-elf` say about a single-kernel cubin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub reg: u32,
    pub shared: u32,
    pub local: u32,
    /// Per-thread stack frame bytes: where ptxas puts a kernel's register spills (STL / LDL), which LOCAL
    /// does not count (sm_90, tileiras 13.4: a spilling kernel reads LOCAL:0 STACK:24).
    pub stack: u32,
    /// Threads per CTA (EIATTR_REQNTID x*y*z); 0 if the cubin does not state it.
    pub threads: u32,
}

fn field(line: &str, key: &str) -> Option<u32> {
    let at = line.find(key)? + key.len();
    let digits: String = line[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Registers, static shared memory, local and stack (spill) bytes and threads per CTA of a cubin's kernel.
pub fn resources(cubin: &[u8], tag: &str) -> Result<Resources, String> {
    let usage = cuobjdump(cubin, &["--dump-resource-usage"], tag)?;
    let line = usage.lines().find(|l| l.contains("REG:")).ok_or_else(|| format!("{tag}: no REG: line in {usage}"))?;
    let mut r = Resources {
        reg: field(line, "REG:").unwrap_or(0),
        shared: field(line, "SHARED:").unwrap_or(0),
        local: field(line, "LOCAL:").unwrap_or(0),
        stack: field(line, "STACK:").unwrap_or(0),
        threads: 0,
    };
    // -elf prints EIATTR_REQNTID then a line "Value: 0x180 0x1 0x1" (x y z).
    let elf = cuobjdump(cubin, &["-elf"], tag)?;
    let mut lines = elf.lines();
    while let Some(l) = lines.next() {
        if l.contains("EIATTR_REQNTID") {
            let vals: Vec<u32> = lines
                .by_ref()
                .take(3)
                .flat_map(|l| l.split_whitespace().filter_map(|w| w.strip_prefix("0x")).map(|h| u32::from_str_radix(h, 16).unwrap_or(0)).collect::<Vec<_>>())
                .collect();
            if !vals.is_empty() {
                r.threads = vals.iter().take(3).product();
            }
            break;
        }
    }
    Ok(r)
}
