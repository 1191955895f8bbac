//! `bench precision`, host vs native (seed 000's table compared the guest's profile with the
//! host's profile of the same code): ftest's own code built for the host
//! (guest/build/host/ftest, the same C source and code-generation flags) is profiled on the
//! host with a software cpu-clock event sampling at the native guest's rate, each sample's
//! IP mapped to its function by the host binary's symbols; its per-function shares are
//! compared with the native guest's cycles profile of the same work.

use perfvm::Failure;
use profile::profile::UNKNOWN;
use profile::resolve::{Resolver, Site};
use std::collections::BTreeMap;
use std::process::Command;

/// Samples per function of one host run.
#[derive(Debug, Default, Clone)]
pub struct HostSamples {
    /// Samples per function name ([unknown] outside the binary's symbols: libc, ld.so).
    pub per_function: BTreeMap<String, u64>,
    /// Samples the kernel could not store.
    pub lost: u64,
}

impl HostSamples {
    /// Samples in all.
    pub fn total(&self) -> u64 {
        self.per_function.values().sum()
    }

    /// Add another run's samples.
    pub fn merge(&mut self, other: &HostSamples) {
        for (f, n) in &other.per_function {
            *self.per_function.entry(f.clone()).or_default() += n;
        }
        self.lost += other.lost;
    }
}

/// Per-function shares of counts (sums to 1; empty without any).
pub fn shares_of(counts: &BTreeMap<String, u64>) -> BTreeMap<String, f64> {
    let total = counts.values().sum::<u64>().max(1) as f64;
    counts.iter().map(|(f, &n)| (f.clone(), n as f64 / total)).collect()
}

/// The host runs, one per repetition: profiled before the suites run, since a confined VMM
/// cannot start a process (docs/SECURITY.md).
static HOST_RUNS: std::sync::OnceLock<Vec<Result<HostSamples, String>>> = std::sync::OnceLock::new();

/// Profile the host's ftest `reps` times now (`units`, `hz` as the native guest's runs).
pub fn measure_host(reps: usize, units: u64, hz: u64) {
    HOST_RUNS
        .get_or_init(|| (0..reps.max(1)).map(|_| profile_host_ftest(units, hz).map_err(|f| f.to_string())).collect());
}

/// Repetition `rep`'s host profile, as `measure_host` took it.
pub fn host_run(rep: usize) -> Result<HostSamples, Failure> {
    let run = HOST_RUNS.get().and_then(|r| r.get(rep)).ok_or_else(|| Failure::failed("host ftest not profiled"))?;
    run.clone().map_err(Failure::failed)
}

/// Profile `ftest units` built for the host, sampling `hz` times per second of its CPU time.
pub fn profile_host_ftest(units: u64, hz: u64) -> Result<HostSamples, Failure> {
    let exe = perfvm::guests::guest_dir().join("host/ftest");
    let period_ns = 1_000_000_000 / hz.max(1);
    let run = vmm::profiling::host_profile::profile(Command::new(&exe).arg(units.to_string()), period_ns)
        .map_err(|e| Failure::failed(format!("cannot profile {}: {e}", exe.display())))?;
    if !run.status.success() {
        return Err(Failure::failed(format!("{} {units} ended with {}", exe.display(), run.status)));
    }
    let (resolver, _) = Resolver::load(&exe, false);
    let mut samples = HostSamples { lost: run.lost, ..Default::default() };
    for ip in run.ips {
        let name = resolver.function(ip, Site::Sampled).map_or(UNKNOWN, |(name, _)| name);
        *samples.per_function.entry(name.to_owned()).or_default() += 1;
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ftest's host build, sampled by the host's cpu-clock: the samples land in ftest's own
    /// functions, found by the binary's symbols.
    #[test]
    fn the_host_build_is_sampled_in_ftests_functions() {
        let s = match profile_host_ftest(500, 10_000) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("SKIP the_host_build_is_sampled_in_ftests_functions: {e}");
                return;
            }
        };
        assert!(s.total() >= 100, "{s:?}");
        let ftest: u64 = ["main", "foo", "bar", "qux", "random", "random_r"]
            .iter()
            .map(|f| s.per_function.get(*f).copied().unwrap_or(0))
            .sum();
        assert!(ftest as f64 >= 0.9 * s.total() as f64, "{s:?}");
        assert!(s.per_function.get("qux").is_some_and(|&n| n > 0), "{s:?}");
    }

    #[test]
    fn shares_sum_to_one_and_merge_adds_up() {
        let mut a = HostSamples::default();
        a.per_function.insert("qux".into(), 3);
        a.per_function.insert("foo".into(), 1);
        let mut b = a.clone();
        b.lost = 2;
        a.merge(&b);
        assert_eq!((a.total(), a.lost), (8, 2));
        let s = shares_of(&a.per_function);
        assert_eq!(s["qux"], 0.75);
        assert_eq!(s["foo"], 0.25);
    }
}
