//! The workloads: scheduler_perf's SchedulingBasic sizes, and the reservation case.

/// One workload: nodes, pods scheduled before the measurement (`init`), pods measured, and
/// Available reservations in place before any pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Name in the report.
    pub name: String,
    /// Nodes (4 CPU / 32Gi / 110 pods each).
    pub nodes: usize,
    /// Pods created and bound before the measured phase.
    pub init_pods: usize,
    /// Pods measured.
    pub pods: usize,
    /// Reservations created and awaited `Available` before the init pods; with any, every
    /// other measured pod is an owner of some of them.
    pub reservations: usize,
    /// Pods no node can take, created once the nodes exist and left until the scheduler has
    /// written them unschedulable; a backlog run's fresh scheduler then retries all of them
    /// (an event flood) while it binds the measured pods.
    pub unschedulable: usize,
}

/// Owner groups of the reservation case: reservation `i` is owned by pods labelled
/// `app=owner-<i mod OWNER_GROUPS>`, so each group matches `reservations / OWNER_GROUPS`
/// reservations.
pub const OWNER_GROUPS: usize = 100;

impl Case {
    /// A case of any size.
    pub fn new(
        name: impl Into<String>,
        nodes: usize,
        init_pods: usize,
        pods: usize,
        reservations: usize,
    ) -> Self {
        Self {
            name: name.into(),
            nodes,
            init_pods,
            pods,
            reservations,
            unschedulable: 0,
        }
    }

    /// This case with `n` unschedulable pods.
    pub fn with_unschedulable(mut self, n: usize) -> Self {
        self.unschedulable = n;
        self
    }

    /// SchedulingBasic 500 nodes / 500 init pods / 1,000 pods.
    pub fn basic_500() -> Self {
        Self::new("basic-500", 500, 500, 1000, 0)
    }

    /// The defaults case of issue 24: 500 nodes, 5,000 pods (a backlog: run it with
    /// `--mode backlog --tuning defaults`), 100 init pods.
    pub fn backlog_500() -> Self {
        Self::new("backlog-500", 500, 100, 5000, 0)
    }

    /// [`Case::backlog_500`] with 10,000 unschedulable pods that the freshly started
    /// scheduler retries while it drains the backlog (issue 24: an event flood must not slow
    /// the binds by more than 10%). Compared with each scheduler's own backlog-500 run.
    pub fn flood_500() -> Self {
        let base = Self::backlog_500();
        Self {
            name: "flood-500".into(),
            ..base
        }
        .with_unschedulable(10_000)
    }

    /// SchedulingBasic 5,000 nodes / 1,000 init pods / 5,000 pods.
    pub fn basic_5000() -> Self {
        Self::new("basic-5000", 5000, 1000, 5000, 0)
    }

    /// [`Case::basic_5000`] with 1,000 Available reservations (100m / 500Mi each,
    /// `allocateOnce`), half of the measured pods owners. Compared with berth's own
    /// [`Case::basic_5000`] run: kube-scheduler has no reservations.
    pub fn reservations() -> Self {
        Self::new("reservations", 5000, 1000, 5000, 1000)
    }

    /// The case of the same size without reservations and unschedulable pods (itself when
    /// it has neither).
    pub fn baseline(&self) -> Case {
        if self.reservations == 0 && self.unschedulable == 0 {
            return self.clone();
        }
        let name = if *self == Self::reservations() {
            Self::basic_5000().name
        } else if *self == Self::flood_500() {
            Self::backlog_500().name
        } else {
            format!("{}-baseline", self.name)
        };
        Self::new(name, self.nodes, self.init_pods, self.pods, 0)
    }

    /// Whether the measured pod `i` carries an owner label, and which.
    pub fn owner_of(&self, i: usize) -> Option<String> {
        (self.reservations > 0 && i.is_multiple_of(2))
            .then(|| format!("owner-{}", (i / 2) % OWNER_GROUPS))
    }
}
