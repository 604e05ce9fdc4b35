//! `berth reserve KIND/NAME`: one gang of Reservations for a workload's replicas, created in
//! one step, then watched until every member is Available (exit 0), one ends or the time
//! runs out (exit 1, naming the first member that is not Available and why), or the input
//! is bad (exit 2, naming the field). The objects are built by [`berth_kube::reserve`].

use std::time::{Duration, Instant};

use anyhow::Context;
use berth_api::GoDuration;
use berth_kube::reserve::{parse_target, plan, standing, Plan, Progress};
use berth_kube::retry::{retry, Backoff};
use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::Client;

#[derive(Debug, Args)]
pub struct ReserveArgs {
    /// The workload: `KIND/NAME` (deployment, replicaset, statefulset, daemonset, job,
    /// cronjob, replicationcontroller; kubectl's short names too).
    #[arg(value_name = "KIND/NAME")]
    target: String,
    /// The workload's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// How many replicas to reserve room for (default: the workload's replicas,
    /// `parallelism` for a Job).
    #[arg(long, value_name = "N")]
    replicas: Option<u32>,
    /// How long the Reservations live unless used (a Go duration; default the API server's
    /// `24h`).
    #[arg(long, value_name = "DURATION")]
    ttl: Option<String>,
    /// How long to wait for every Reservation to be Available (a Go duration).
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    timeout: String,
    /// Print the Reservations as YAML and create nothing.
    #[arg(long)]
    dry_run: bool,
    /// A kubeconfig file (default: the in-cluster configuration, then `$KUBECONFIG` /
    /// `~/.kube/config`).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<String>,
}

/// Runs `berth reserve`; the exit status.
pub fn reserve(args: ReserveArgs) -> anyhow::Result<i32> {
    let bad = |message: String| {
        eprintln!("error: {message}");
        Ok(2)
    };
    let (kind, name) = match parse_target(&args.target) {
        Ok(t) => t,
        Err(e) => return bad(e.to_string()),
    };
    let ttl = match args.ttl.as_deref().map(|t| GoDuration::new(t.trim())) {
        Some(d) if d.millis().map_or(true, |m| m <= 0) => {
            return bad(format!("--ttl {}: not a positive duration", d.as_str()))
        }
        other => other,
    };
    let timeout = match GoDuration::new(args.timeout.trim()).millis() {
        Ok(ms) if ms > 0 => Duration::from_millis(ms.unsigned_abs()),
        _ => {
            return bad(format!(
                "--timeout {}: not a positive duration",
                args.timeout
            ))
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let settings = berth_kube::settings::ClientConnection::default();
        let client = berth_kube::client::connect(args.kubeconfig.as_deref(), &settings).await?;
        let gvk = match kind.api_version.split_once('/') {
            Some((group, version)) => GroupVersionKind::gvk(group, version, kind.kind),
            None => GroupVersionKind::gvk("", kind.api_version, kind.kind),
        };
        let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &args.namespace, &resource);
        let workload = match api.get(&name).await {
            Ok(w) => serde_json::to_value(w)?,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return bad(format!(
                    "{}/{name} not found in namespace {}",
                    kind.kind, args.namespace
                ))
            }
            Err(e) => return Err(e).context(format!("reading {}/{name}", kind.kind)),
        };
        let plan = match plan(kind, &workload, args.replicas, ttl) {
            Ok(p) => p,
            Err(e) => return bad(e.to_string()),
        };
        if args.dry_run {
            for r in &plan.reservations {
                print!("---\n{}", serde_yaml_ng::to_string(r)?);
            }
            return Ok(0);
        }
        create(&client, &plan).await?;
        wait(&client, &plan, timeout).await
    })
}

/// Creates the gang's Reservations; one that exists already (a second run) is kept.
async fn create(client: &Client, plan: &Plan) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    );
    let pp = PostParams::default();
    for r in &plan.reservations {
        let name = r.metadata.name.clone().unwrap_or_default();
        let obj: DynamicObject = serde_json::from_value(serde_json::to_value(r)?)?;
        match retry(Backoff::default(), || api.create(&pp, &obj)).await {
            Ok(_) => eprintln!("reservation {name} created"),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                eprintln!("reservation {name} exists already")
            }
            Err(e) => return Err(e).context(format!("creating reservation {name}")),
        }
    }
    Ok(())
}

/// Polls the Reservations until all are Available, one ended, or `timeout` passed; prints
/// each change of the progress line on standard error.
async fn wait(client: &Client, plan: &Plan, timeout: Duration) -> anyhow::Result<i32> {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &berth_kube::kinds::Served::reservation_resource(),
    );
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let mut standings = Vec::with_capacity(plan.reservations.len());
        for r in &plan.reservations {
            let name = r.metadata.name.clone().unwrap_or_default();
            let got = retry(Backoff::default(), || api.get_opt(&name)).await?;
            let s = match got {
                Some(o) => standing(&serde_json::to_value(o)?),
                None => berth_kube::reserve::Standing::Ended("Deleted".into()),
            };
            standings.push((name, s));
        }
        let progress = Progress::of(&standings);
        let line = progress.line();
        if line != last {
            eprintln!("gang {}: {line}", plan.gang);
            last = line;
        }
        if progress.done() {
            for (name, s) in &standings {
                if let berth_kube::reserve::Standing::Available(node) = s {
                    println!("{name}\t{node}");
                }
            }
            return Ok(0);
        }
        if progress.failed() {
            eprintln!("error: gang {}: {}", plan.gang, progress.line());
            return Ok(1);
        }
        if started.elapsed() >= timeout {
            eprintln!(
                "error: gang {}: not all Available after {}s: {}",
                plan.gang,
                timeout.as_secs(),
                progress.line()
            );
            return Ok(1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
