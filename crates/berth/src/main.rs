//! `berth`: the command line. Every subcommand is a thin shell over a library call; the
//! exit status of `simulate` is the contract's (0 ran, 1 expectation failed, 2 bad input).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use berth_sim::{Format, Options};

mod live;
mod reserve;

/// A Kubernetes scheduler with Koordinator reservations and NUMA-aware placement.
#[derive(Debug, Parser)]
#[command(name = "berth", version = env!("BERTH_VERSION"), about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Schedule the objects of FILE... in a simulated cluster, in virtual time, and print
    /// the result.
    #[command(after_help = SIMULATE_HELP)]
    Simulate(SimulateArgs),
    /// Schedule a real cluster: watch it through the API server and bind the pods whose
    /// `schedulerName` names one of the profiles, until SIGTERM.
    Run(RunArgs),
    /// The Dynamic Reservation Provisioning provisioner: create the Reservation an unbound
    /// pod's `new-reservation-requirement` asks for (once per reservation id), until
    /// SIGTERM. `berth run` adopts it and binds the pod into it.
    Provisioner(ProvisionerArgs),
    /// Koordinator's PodMigrationJob controller: migrate the pods PodMigrationJobs name
    /// (ReservationFirst: a Reservation placed by `berth run` first, then the eviction through
    /// `pods/eviction`; or EvictDirectly), until SIGTERM.
    Migrate(MigrateArgs),
    /// Print the CustomResourceDefinitions berth reads (Reservation, NodeResourceTopology)
    /// as multi-document YAML, for `kubectl apply -f -`.
    Crd,
    /// Measure scheduling throughput on generated clusters (kube-scheduler's
    /// SchedulingBasic shapes) and print pods/s and per-cycle latency.
    Bench(BenchArgs),
    /// Why is TARGET pending: per node every plugin's rejection, scores, the reservations
    /// matching it as owner and why each was not used, NUMA zones, and the smallest change
    /// that would let it fit. On the cluster FILE... simulate to (or, with --kubeconfig, on a
    /// live cluster, read-only).
    Explain(ExplainArgs),
    /// Reserve room for a workload's replicas before its pods exist: one Reservation per
    /// replica from its pod template, owned by its pods, placed all together or not at all
    /// (one gang); waits until all are Available or says why not.
    Reserve(reserve::ReserveArgs),
}

/// Where `simulate --help` sends readers for the format.
const SIMULATE_HELP: &str = "\
The input format (every kind read, the Scenario's steps, `expect`, the node agents, exit \
statuses and the output) is described in docs/scenario-format.md of berth's source \
repository; examples/ holds runnable inputs.

Exit status: 0 the simulation ran, 1 a Scenario expectation failed, 2 bad input.";

#[derive(Debug, Args)]
struct ExplainArgs {
    /// A pod (`NAME`, `NAMESPACE/NAME`, `pod/NAME`) or `reservation/NAME`.
    #[arg(value_name = "TARGET")]
    target: String,
    /// Scenario files, as for `simulate` (`-` is standard input). Not with --kubeconfig.
    #[arg(
        value_name = "FILE",
        required_unless_present = "kubeconfig",
        conflicts_with = "kubeconfig"
    )]
    files: Vec<String>,
    /// Explain on a live cluster: LIST its objects (read-only, nothing is written) and build
    /// the scheduler's state from them.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// A kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration (profiles and plugin args).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Output: plain text, or the explanation as JSON for tools.
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"])]
    output: String,
    /// Seed, as for `simulate` (the simulated run up to the end of the input uses it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// A kubeconfig file (default: `clientConnection.kubeconfig`, then the in-cluster
    /// configuration, then `$KUBECONFIG` / `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// A kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration: profiles and plugin args
    /// as for `simulate`, plus `clientConnection` (qps, burst, kubeconfig) and
    /// `leaderElection`.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Where to serve /metrics, /healthz, /livez and /readyz (empty: not served).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:10259")]
    metrics_bind_address: String,
    /// Log format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Binds in flight at most; past it new scheduling cycles wait for a slot.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_binds_in_flight: usize,
}

#[derive(Debug, Args)]
struct ProvisionerArgs {
    /// A kubeconfig file (default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// Log format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

#[derive(Debug, Args)]
struct MigrateArgs {
    /// A kubeconfig file (default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// Log format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Pods of one node migrating at once (Koordinator's maxMigratingPerNode; 0: no limit).
    #[arg(long, value_name = "N", default_value_t = 2)]
    max_migrating_per_node: u32,
    /// Pods of one namespace migrating at once (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_migrating_per_namespace: u32,
    /// Pods of one workload migrating at once (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_migrating_per_workload: u32,
    /// Unavailable plus migrating pods of one workload at once (0: no limit).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_unavailable_per_workload: u32,
    /// Elect a leader on the Lease `<namespace>/berth-migrate`, so that of several replicas
    /// only one acts (`--leader-elect=false`: this process acts from the start).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The Lease's namespace (default: the one berth runs in, else kube-system).
    #[arg(long, value_name = "NAMESPACE")]
    lease_namespace: Option<String>,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Nodes in the generated cluster (default: 5,000; the NUMA suite's 1,000).
    #[arg(long)]
    nodes: Option<usize>,
    /// Measured pods (default: each workload's scheduler_perf figure, 10,000 for
    /// SchedulingBasic; the NUMA suite's 20,000).
    #[arg(long)]
    pods: Option<usize>,
    /// Which workload: a scheduler_perf name (SchedulingBasic, TopologySpreading, ...),
    /// Reservations, NUMA, all, or the older basic, reservations, numa. Another name is bad
    /// input (exit status 2, as for `simulate`), rejected before anything runs.
    #[arg(long, default_value = "basic",
          value_parser = clap::builder::PossibleValuesParser::new(berth_sim::bench::SUITES))]
    suite: String,
    /// Also count each case's instructions per pod under valgrind's callgrind (exact where
    /// wall time is noisy; the case runs a second time, about 50 times slower; left out
    /// when valgrind is not installed).
    #[arg(long)]
    instructions: bool,
    /// Run only the case of this name (how `--instructions` re-runs one case).
    #[arg(long, hide = true)]
    only_case: Option<String>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Multi-document YAML files (Nodes, Pods, Reservations, NodeResourceTopologies, ...
    /// and at most one Scenario), read in order; `-` is standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// A kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration (default: every plugin
    /// enabled with kube-scheduler's default weights).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Output: a human summary, or the final cluster state as one v1 List.
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "table",
          value_parser = ["table", "json", "yaml"])]
    output: String,
    /// Seed for tie-breaking between equally scored nodes; equal inputs and seeds give
    /// byte-identical output.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// Log on standard error what each step applied and what got scheduled, expired or
    /// failed, at which virtual time.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Write a self-contained HTML report of the run (timeline, per-node use, reservation
    /// fill, unschedulable pods, NUMA zones) to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate(args),
        Command::Run(args) => run(args),
        Command::Provisioner(args) => provisioner(args),
        Command::Reserve(args) => reserve::reserve(args),
        Command::Migrate(args) => migrate(args),
        Command::Crd => crd().map(|()| 0),
        Command::Bench(args) => bench(&args),
        Command::Explain(args) => explain(args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn simulate(args: SimulateArgs) -> anyhow::Result<i32> {
    let output: Format = args
        .output
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let options = Options {
        files: args.files,
        config: args.config,
        output,
        seed: args.seed,
    };
    let extras = berth_sim::observe::Extras {
        verbose: args.verbose,
        report: args.report,
        progress: true,
    };
    // The output is streamed to standard output as it is rendered (a million pods' worth is
    // never held whole); standard error follows it, as before.
    let out = berth_sim::observe::run_to(
        &options,
        &extras,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
    );
    write_ignoring_broken_pipe(&mut std::io::stderr().lock(), &out.stderr)
        .context("writing standard error")?;
    Ok(out.code)
}

fn explain(args: ExplainArgs) -> anyhow::Result<i32> {
    let format: berth_sim::explain::ExplainFormat = args
        .output
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let out = match &args.kubeconfig {
        Some(kubeconfig) => live::explain(kubeconfig, args.config.as_deref(), &args.target, format),
        None => {
            let options = Options {
                files: args.files,
                config: args.config,
                output: Format::Table,
                seed: args.seed,
            };
            berth_sim::explain::run(&args.target, &options, format, &mut std::io::stdin().lock())
        }
    };
    write_ignoring_broken_pipe(&mut std::io::stdout().lock(), &out.stdout)
        .context("writing standard output")?;
    write_ignoring_broken_pipe(&mut std::io::stderr().lock(), &out.stderr)
        .context("writing standard error")?;
    Ok(out.code)
}

fn run(args: RunArgs) -> anyhow::Result<i32> {
    init_logging(&args.log_format);
    let settings = match &args.config {
        Some(path) => match berth_kube::Settings::load(path) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(2);
            }
        },
        None => berth_kube::Settings::builtin(),
    };
    let metrics_addr = if args.metrics_bind_address.is_empty() {
        None
    } else {
        match args.metrics_bind_address.parse() {
            Ok(a) => Some(a),
            Err(e) => {
                eprintln!(
                    "error: --metrics-bind-address {:?}: {e}",
                    args.metrics_bind_address
                );
                return Ok(2);
            }
        }
    };
    let mut options = berth_kube::RunOptions::new(settings);
    options.kubeconfig = args.kubeconfig;
    options.metrics_addr = metrics_addr;
    options.max_binds_in_flight = args.max_binds_in_flight;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match runtime.block_on(berth_kube::run(options, shutdown_signal())) {
        Ok(()) => Ok(0),
        // As kube-scheduler (klog.FlushAndExit(1)): the process exits at once, whatever
        // tasks are still blocked on the network, and the restart rebuilds from LISTs.
        Err(e @ (berth_kube::Error::LeadershipLost | berth_kube::Error::LeaseForbidden { .. })) => {
            tracing::error!("{e}");
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        Err(e) => Err(e.into()),
    }
}

fn provisioner(args: ProvisionerArgs) -> anyhow::Result<i32> {
    init_logging(&args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let settings = berth_kube::settings::ClientConnection::default();
        let client = berth_kube::client::connect(args.kubeconfig.as_deref(), &settings).await?;
        let outcome = berth_kube::watch::provisioner::run(client, shutdown_signal()).await;
        tracing::info!(
            created = outcome.created,
            existing = outcome.existing,
            failed = outcome.failed,
            "provisioner stopped"
        );
        Ok(0)
    })
}

fn migrate(args: MigrateArgs) -> anyhow::Result<i32> {
    init_logging(&args.log_format);
    let limit = |n: u32| (n > 0).then_some(n);
    let options = berth_kube::migrate::MigrateOptions {
        args: berth_core::migration::MigrationArgs {
            max_migrating_per_node: limit(args.max_migrating_per_node),
            max_migrating_per_namespace: limit(args.max_migrating_per_namespace),
            max_migrating_per_workload: limit(args.max_migrating_per_workload),
            max_unavailable_per_workload: limit(args.max_unavailable_per_workload),
        },
        ..Default::default()
    };
    let options = if args.leader_elect {
        let namespace = args
            .lease_namespace
            .clone()
            .unwrap_or_else(berth_kube::settings::default_lease_namespace);
        options.elect_leader_in(&namespace)
    } else {
        options
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let settings = berth_kube::settings::ClientConnection::default();
        let client = berth_kube::client::connect(args.kubeconfig.as_deref(), &settings).await?;
        let outcome = berth_kube::migrate::run(client, options, shutdown_signal()).await;
        tracing::info!(?outcome, "PodMigrationJob controller stopped");
        // Like `berth run`, a lost lease is an exit with an error (the kubelet restarts it
        // as a standby).
        Ok(i32::from(outcome.lost_lease))
    })
}

/// SIGTERM (what the kubelet sends) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Logs to standard error, as text or JSON lines; `RUST_LOG` filters (default `info`).
/// Colours only when standard error is a terminal: a container log or a file gets plain text.
fn init_logging(format: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn crd() -> anyhow::Result<()> {
    let reservation = berth_api::crd::to_yaml(&berth_api::crd::reservation_crd())?;
    let nrt = berth_api::crd::to_yaml(&berth_api::nrt::nrt_crd())?;
    let migration = berth_api::crd::to_yaml(&berth_api::crd::pod_migration_job_crd())?;
    let text = format!("{reservation}---\n{nrt}---\n{migration}");
    write_ignoring_broken_pipe(&mut std::io::stdout().lock(), &text)
        .context("writing standard output")?;
    Ok(())
}

/// `berth simulate ... | head` must not end in a panic or an error message.
fn write_ignoring_broken_pipe(w: &mut dyn Write, text: &str) -> std::io::Result<()> {
    match w.write_all(text.as_bytes()).and_then(|()| w.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `berth bench`: 0 when the suite ran, 2 for an unknown suite (bad input).
fn bench(args: &BenchArgs) -> anyhow::Result<i32> {
    let parts = match berth_sim::bench::suite_parts(&args.suite, args.nodes, args.pods) {
        Ok(parts) => parts,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(2);
        }
    };
    let parts: Vec<_> = parts
        .into_iter()
        .filter(|p| match (&args.only_case, p) {
            (None, _) => true,
            (Some(name), berth_sim::bench::Part::Case(c)) => c.name == *name,
            (Some(name), berth_sim::bench::Part::Numa(p)) => {
                berth_sim::bench_numa::case_params(p, name).is_some()
            }
        })
        .collect();
    if let (Some(name), [berth_sim::bench::Part::Numa(p)]) = (&args.only_case, &parts[..]) {
        // `--instructions`' child for the NUMA suite: the reserve-cache mode alone, with or
        // without LSR pods.
        let p = berth_sim::bench_numa::case_params(p, name).unwrap_or_else(|| p.clone());
        let o = berth_sim::bench_numa::run_mode(&p, true);
        writeln!(
            std::io::stdout().lock(),
            "{name} {}",
            berth_sim::bench_numa::format_outcome(&o)
        )
        .context("writing standard output")?;
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    for part in &parts {
        let lines = berth_sim::progress::spin("bench", || {
            berth_sim::bench::run_part(part, args.instructions)
        });
        for line in lines {
            writeln!(out, "{line}").context("writing standard output")?;
            out.flush().context("writing standard output")?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_help_says_where_the_format_is_described() {
        let err = Cli::try_parse_from(["berth", "simulate", "--help"]).expect_err("help");
        let help = err.to_string();
        assert!(help.contains("docs/scenario-format.md"), "{help}");
        assert!(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../docs/scenario-format.md")
                .is_file(),
            "the file --help names exists"
        );
    }

    #[test]
    fn the_version_names_the_commit() {
        let err = Cli::try_parse_from(["berth", "--version"]).expect_err("version");
        let version = err.to_string();
        let rest = version
            .strip_prefix(&format!("berth {} (commit ", env!("CARGO_PKG_VERSION")))
            .unwrap_or_else(|| panic!("{version:?}"));
        let stamp = rest.trim_end().strip_suffix(')').unwrap_or_default();
        let ok = stamp == "unknown"
            || stamp.split_once(", ").is_some_and(|(hash, state)| {
                hash.len() == 12
                    && hash.chars().all(|c| c.is_ascii_hexdigit())
                    && matches!(state, "clean" | "dirty")
            });
        assert!(ok, "{version:?}");
    }

    #[test]
    fn an_unknown_bench_suite_is_bad_input() {
        let err =
            Cli::try_parse_from(["berth", "bench", "--suite", "nope"]).expect_err("no such suite");
        assert_eq!(err.exit_code(), 2, "{err}");
        assert!(
            err.to_string()
                .contains("possible values: SchedulingBasic, TopologySpreading"),
            "{err}"
        );
        for suite in berth_sim::bench::SUITES {
            let cli = Cli::try_parse_from(["berth", "bench", "--suite", suite]);
            assert!(cli.is_ok(), "{suite}");
        }
    }
}
