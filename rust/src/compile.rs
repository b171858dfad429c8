//! Compiling kernels without a GPU: cuTile-rs's `KernelCompiler` emits Tile IR bytecode from the
//! kernel's AST with no driver, and the pinned `tileiras` assembles it to a cubin for any supported
//! architecture on the CPU. `cargo test` uses this to prove every kernel compiles for sm_90.

use std::path::PathBuf;
use std::process::Command;

use cutile::compile_api::KernelCompiler;

use crate::ops::KernelSpec;

/// Tile IR bytecode of one specialisation for `arch` (e.g. "sm_90").
pub fn bytecode(spec: &KernelSpec, arch: &str) -> Result<Vec<u8>, String> {
    let strides: Vec<(&str, &[i32])> = spec.strides.iter().map(|(n, s)| (*n, s.as_slice())).collect();
    let artifacts = KernelCompiler::new(spec.ast, spec.module, spec.function)
        .generics(spec.generics.clone())
        .strides(&strides)
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
    let tileiras = find_tileiras().ok_or("tileiras not found (set CUTILE_TILEIRAS_PATH)")?;
    let dir = std::env::temp_dir().join(format!("tilerosetta-cutile-rs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let input = dir.join(format!("{tag}.tilebc"));
    let output = dir.join(format!("{tag}.cubin"));
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
        return Err(format!(
            "{tag}: tileiras --gpu-name={arch} failed ({}): {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let size = std::fs::metadata(&output).map_err(|e| e.to_string())?.len() as usize;
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    Ok(size)
}
