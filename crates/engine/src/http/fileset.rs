//! A SPECweb99-like static file set: its layout, its deterministic
//! generation into a cache, and the request mix over it.
//!
//! SPECweb99 (the SPEC run rules, section 2.2 "file set") puts 4 classes of
//! 9 files in each directory; class c's file n (n = 0..8) is base_c x (n+1)/10
//! bytes with bases 1 KiB, 10 KiB, 100 KiB and 1,000 KiB, about 5.12 MB a
//! directory. A request picks a class 35/50/14/1 %, a directory by Zipf
//! (alpha = 1), and a file within the class by Zipf (alpha = 1) over
//! SPECweb99's popularity order 4, 3, 5, 2, 6, 1, 7, 8, 0 (file 4 most
//! requested). Written here from that published description.
//!
//! The content is incompressible (xoroshiro128** output, seeded per file from
//! the set's seed), so a compressing filesystem or transport cannot shrink it.

use crate::error::EngineError;
use crate::random::Prng;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

pub const CLASSES: usize = 4;
pub const FILES_PER_CLASS: usize = 9;
/// Each class's base size; file n of class c is `CLASS_BASE[c] * (n + 1) / 10`.
pub const CLASS_BASE: [u64; CLASSES] = [1024, 10 * 1024, 100 * 1024, 1000 * 1024];
/// The share of requests of each class.
pub const CLASS_SHARE: [f64; CLASSES] = [0.35, 0.50, 0.14, 0.01];
/// The class names, which are the protocol's transaction types.
pub const CLASS_NAMES: [&str; CLASSES] = ["class0", "class1", "class2", "class3"];
/// SPECweb99's file order: the k-th most requested file of a class.
pub const FILE_ORDER: [usize; FILES_PER_CLASS] = [4, 3, 5, 2, 6, 1, 7, 8, 0];
/// Bumped when the layout or the content of a set changes (a new cache key).
const LAYOUT_VERSION: u32 = 1;
/// The file a finished set holds, written last (its presence means complete).
const COMPLETE_MARKER: &str = ".perflab-fileset-complete";

/// Size in bytes of file `file` (0..9) of class `class` (0..4).
#[inline]
pub fn file_size(class: usize, file: usize) -> u64 {
    CLASS_BASE[class] * (file as u64 + 1) / 10
}

/// Bytes of one directory (36 files).
pub fn dir_bytes() -> u64 {
    (0..CLASSES)
        .flat_map(|c| (0..FILES_PER_CLASS).map(move |f| file_size(c, f)))
        .sum()
}

/// Directories for a set of at least `bytes`.
pub fn dirs_for_size(bytes: u64) -> u32 {
    bytes.div_ceil(dir_bytes()).max(1) as u32
}

/// Directories for `connections` by SPECweb99's rule,
/// int(25 + (400000 / 122000 x connections) / 5).
pub fn dirs_for_connections(connections: u32) -> u32 {
    (25.0 + (400_000.0 / 122_000.0 * connections as f64) / 5.0) as u32
}

/// A file's path under the set's root: "dir00042/class2_7".
pub fn relative_path(dir: u32, class: usize, file: usize) -> String {
    format!("dir{dir:05}/class{class}_{file}")
}

/// The cache entry's directory name: every parameter of the content is in it.
pub fn cache_name(dirs: u32, seed: u64) -> String {
    format!("perflab-fileset-v{LAYOUT_VERSION}-{dirs}d-seed{seed}")
}

fn file_seed(seed: u64, dir: u32, class: usize, file: usize) -> u64 {
    seed ^ ((dir as u64) << 16 | (class as u64) << 8 | file as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The bytes of one file: deterministic from (seed, dir, class, file).
pub fn fill_file(buf: &mut Vec<u8>, seed: u64, dir: u32, class: usize, file: usize) {
    let size = file_size(class, file) as usize;
    buf.clear();
    let mut rng = Prng::seeded(file_seed(seed, dir, class, file));
    while buf.len() + 8 <= size {
        buf.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    let rest = size - buf.len();
    buf.extend_from_slice(&rng.next_u64().to_le_bytes()[..rest]);
}

/// What `prepare` found or made.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub root: PathBuf,
    pub dirs: u32,
    pub files: u64,
    /// Bytes on disk, summed from every file's size (checked to be the layout's).
    pub bytes: u64,
    /// False when the set came from the cache.
    pub generated: bool,
    pub seconds: f64,
}

/// The file set of `dirs` directories and `seed` under `cache_dir`: reused
/// when a complete one is there (its sizes checked), else generated on
/// `jobs` threads into a temporary directory that is renamed when whole.
pub fn prepare(
    cache_dir: &Path,
    dirs: u32,
    seed: u64,
    jobs: u32,
    abort: &AtomicBool,
) -> Result<Prepared, EngineError> {
    if dirs == 0 {
        return Err(EngineError::Config(
            "a file set needs at least 1 directory".into(),
        ));
    }
    let started = Instant::now();
    let io = |what: &str, path: &Path, e: std::io::Error| {
        EngineError::Target(format!("file set: cannot {what} {}: {e}", path.display()))
    };
    fs::create_dir_all(cache_dir).map_err(|e| io("create", cache_dir, e))?;
    let root = cache_dir.join(cache_name(dirs, seed));
    if root.join(COMPLETE_MARKER).exists() {
        match verify(&root, dirs) {
            Ok((files, bytes)) => {
                return Ok(Prepared {
                    root,
                    dirs,
                    files,
                    bytes,
                    generated: false,
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
            // A damaged entry is made again (it is perflab's own cache).
            Err(_) => fs::remove_dir_all(&root).map_err(|e| io("remove", &root, e))?,
        }
    } else if root.exists() {
        fs::remove_dir_all(&root).map_err(|e| io("remove", &root, e))?;
    }
    let partial = cache_dir.join(format!(
        "{}.partial-{}",
        cache_name(dirs, seed),
        std::process::id()
    ));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(|e| io("remove", &partial, e))?;
    }
    let result = generate(&partial, dirs, seed, jobs.max(1), abort);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    fs::File::create(partial.join(COMPLETE_MARKER)).map_err(|e| io("write", &partial, e))?;
    fs::rename(&partial, &root).map_err(|e| io("rename", &partial, e))?;
    let (files, bytes) = verify(&root, dirs)?;
    Ok(Prepared {
        root,
        dirs,
        files,
        bytes,
        generated: true,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn generate(
    into: &Path,
    dirs: u32,
    seed: u64,
    jobs: u32,
    abort: &AtomicBool,
) -> Result<(), EngineError> {
    let next = AtomicU32::new(0);
    let failed: std::sync::Mutex<Option<EngineError>> = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(dirs) {
            scope.spawn(|| {
                let mut buf =
                    Vec::with_capacity(file_size(CLASSES - 1, FILES_PER_CLASS - 1) as usize);
                loop {
                    let dir = next.fetch_add(1, Ordering::Relaxed);
                    if dir >= dirs || failed.lock().unwrap().is_some() {
                        return;
                    }
                    if abort.load(Ordering::Relaxed) {
                        *failed.lock().unwrap() = Some(EngineError::Interrupted);
                        return;
                    }
                    if let Err(e) = write_dir(into, dir, seed, &mut buf) {
                        failed.lock().unwrap().get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    match failed.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn write_dir(into: &Path, dir: u32, seed: u64, buf: &mut Vec<u8>) -> Result<(), EngineError> {
    let path = into.join(format!("dir{dir:05}"));
    fs::create_dir_all(&path).map_err(|e| {
        EngineError::Target(format!("file set: cannot create {}: {e}", path.display()))
    })?;
    for class in 0..CLASSES {
        for file in 0..FILES_PER_CLASS {
            fill_file(buf, seed, dir, class, file);
            let name = path.join(format!("class{class}_{file}"));
            fs::File::create(&name)
                .and_then(|mut f| f.write_all(buf))
                .map_err(|e| {
                    EngineError::Target(format!("file set: cannot write {}: {e}", name.display()))
                })?;
        }
    }
    Ok(())
}

/// Every file of the set has its layout's size: (files, bytes).
pub fn verify(root: &Path, dirs: u32) -> Result<(u64, u64), EngineError> {
    let mut files = 0;
    let mut bytes = 0;
    for dir in 0..dirs {
        for class in 0..CLASSES {
            for file in 0..FILES_PER_CLASS {
                let path = root.join(relative_path(dir, class, file));
                let size = fs::metadata(&path).map(|m| m.len()).map_err(|e| {
                    EngineError::Target(format!("file set: {}: {e}", path.display()))
                })?;
                if size != file_size(class, file) {
                    return Err(EngineError::Target(format!(
                        "file set: {} has {size} bytes, the layout says {}",
                        path.display(),
                        file_size(class, file)
                    )));
                }
                files += 1;
                bytes += size;
            }
        }
    }
    Ok((files, bytes))
}

/// A Zipf (alpha = 1) distribution over 0..n as a cumulative table.
fn zipf_cdf(n: usize) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|k| 1.0 / k as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect();
    if let Some(last) = cdf.last_mut() {
        *last = 1.0;
    }
    cdf
}

#[inline]
fn pick(cdf: &[f64], u: f64) -> usize {
    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
}

/// The request mix: a class by share, a directory and a file by Zipf.
#[derive(Debug, Clone)]
pub struct Chooser {
    class_cdf: Vec<f64>,
    dir_cdf: Vec<f64>,
    file_cdf: Vec<f64>,
}

impl Chooser {
    pub fn new(dirs: u32) -> Chooser {
        let mut acc = 0.0;
        let mut class_cdf: Vec<f64> = CLASS_SHARE
            .iter()
            .map(|s| {
                acc += s;
                acc
            })
            .collect();
        class_cdf[CLASSES - 1] = 1.0;
        Chooser {
            class_cdf,
            dir_cdf: zipf_cdf(dirs as usize),
            file_cdf: zipf_cdf(FILES_PER_CLASS),
        }
    }

    /// (class, dir, file) of the next request.
    #[inline]
    pub fn choose(&self, rng: &mut Prng) -> (usize, u32, usize) {
        let class = pick(&self.class_cdf, rng.next_f64());
        let dir = pick(&self.dir_cdf, rng.next_f64()) as u32;
        let file = FILE_ORDER[pick(&self.file_cdf, rng.next_f64())];
        (class, dir, file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_about_5_12_mb_and_sizes_follow_the_bases() {
        // 1111 KiB x 4.5, less the fractions of a byte class 0 and 1 sizes drop.
        assert_eq!(dir_bytes(), 5_119_484);
        assert_eq!(file_size(0, 0), 102);
        assert_eq!(file_size(1, 0), 1024);
        assert_eq!(file_size(3, 8), 921_600);
        assert_eq!(dirs_for_size(1_500_000_000), 293);
        // SPECweb99's rule: 100 connections -> int(25 + 327.87 / 5) = 90.
        assert_eq!(dirs_for_connections(100), 90);
    }

    #[test]
    fn the_mix_is_35_50_14_1_and_file_4_is_the_most_requested() {
        let chooser = Chooser::new(10);
        let mut rng = Prng::seeded(1);
        let n = 400_000;
        let mut classes = [0u64; CLASSES];
        let mut files = [0u64; FILES_PER_CLASS];
        let mut dirs = [0u64; 10];
        for _ in 0..n {
            let (c, d, f) = chooser.choose(&mut rng);
            classes[c] += 1;
            files[f] += 1;
            dirs[d as usize] += 1;
        }
        for (c, share) in CLASS_SHARE.iter().enumerate() {
            let got = classes[c] as f64 / n as f64;
            assert!((got - share).abs() < 0.005, "class {c}: {got}");
        }
        // Zipf over 9: 1/H9 = 0.3535 for the first in order, file 4.
        let f4 = files[4] as f64 / n as f64;
        assert!((f4 - 0.3535).abs() < 0.005, "{f4}");
        let order: Vec<usize> = FILE_ORDER.to_vec();
        for w in order.windows(2) {
            assert!(files[w[0]] > files[w[1]], "{files:?}");
        }
        assert!(dirs[0] > 2 * dirs[1] - dirs[1] / 5, "{dirs:?}");
    }

    #[test]
    fn the_set_is_deterministic_incompressible_cached_and_checked() {
        let cache =
            std::env::temp_dir().join(format!("perflab-fileset-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&cache);
        let abort = AtomicBool::new(false);
        let first = prepare(&cache, 2, 9, 2, &abort).unwrap();
        assert!(first.generated);
        assert_eq!((first.files, first.bytes), (72, 2 * dir_bytes()));
        let again = prepare(&cache, 2, 9, 2, &abort).unwrap();
        assert!(!again.generated, "the second prepare reuses the cache");
        let a = fs::read(first.root.join("dir00001/class2_3")).unwrap();
        let mut b = Vec::new();
        fill_file(&mut b, 9, 1, 2, 3);
        assert_eq!(a, b);
        // Incompressible: every byte value about equally often.
        let mut counts = [0u32; 256];
        for &x in &a {
            counts[x as usize] += 1;
        }
        let mean = a.len() as f64 / 256.0;
        assert!(counts.iter().all(|&c| (c as f64 - mean).abs() < mean * 0.3));
        // A damaged file is found and the set made again.
        fs::write(first.root.join("dir00000/class0_0"), b"x").unwrap();
        assert!(verify(&first.root, 2).is_err());
        let remade = prepare(&cache, 2, 9, 1, &abort).unwrap();
        assert!(remade.generated);
        fs::remove_dir_all(&cache).unwrap();
    }
}
