#!/usr/bin/env bash
# Builds the test cluster's real binaries (kube-apiserver, kube-scheduler, kube-controller-manager,
# kubectl, etcd), koord-scheduler (the oracle of the Koordinator differential tests, with
# Koordinator's CRDs copied beside it into koordinator-crds/) and helm (the chart tests:
# `helm lint`, `helm template`) from the Go modules pinned in tools/k8s, tools/etcd,
# tools/koord and tools/helm, into target/test-cluster/bin (ignored by git).
# Only go.mod, go.sum and the scripts are ours; the code comes from the Go module proxy.
#
# A module's binaries are rebuilt only when its stamp changes: the pinned version plus a hash
# of its go.mod, go.sum and the build flags below. Up to date, the script returns at once and
# needs no Go, so prebuilt binaries keep working on a machine without it.
#
#   tools/build.sh            build what is missing or stale
#   tools/build.sh --print    print the bin directory (for BERTH_TEST_BIN_DIR)
#
# Environment: BERTH_TEST_BIN_DIR overrides the output directory. Exit status 3: Go is not
# installed (berth-testcluster turns that into a message saying what to install).
# A cold build took about 8 minutes on a 2-core machine: 7m51s compiling (kubernetes 418 s,
# etcd 53 s) plus about 30 s downloading modules from the proxy; helm adds about 2 minutes,
# kube-controller-manager about 2 CPU-minutes (126 s of compiling and linking on top of a
# cache holding the other three).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
bin="${BERTH_TEST_BIN_DIR:-$root/target/test-cluster/bin}"
if [[ "${1:-}" == "--print" ]]; then
  echo "$bin"
  exit 0
fi

# One `go build` for the four: they share most of the module graph (kube-controller-manager
# adds its controllers and the volume plugins), so each package compiles once.
k8s_pkgs=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
k8s_bins=(kube-apiserver kube-scheduler kube-controller-manager kubectl)
# Version variables, as kubernetes' hack/lib/version.sh sets them (kubectl reads client-go's,
# the servers component-base's). buildDate is the release's own time, from the module proxy,
# so the binaries are reproducible; the git commit is not known to the proxy: set empty rather
# than left at the "$Format:%H$" placeholder.
k8s_ldflags() {
  local minor date kv flags="-s -w"
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  date=$(cd "$here/k8s" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
  for kv in "gitVersion=$K8S_VERSION" gitMajor=1 "gitMinor=$minor" gitTreeState=clean "buildDate=$date" gitCommit=; do
    flags="$flags -X 'k8s.io/component-base/version.$kv' -X 'k8s.io/client-go/pkg/version.$kv'"
  done
  echo "$flags"
}
# etcd's version is a constant of its api module (right by construction); only GitSHA is
# stamped at build time, and a module download has no commit: stamp the release tag.
etcd_ldflags() {
  echo "-s -w -X 'go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION'"
}
# helm's version variables, as its Makefile sets them for a tagged release (the module proxy
# knows no commit).
helm_ldflags() {
  echo "-s -w -X 'helm.sh/helm/v4/internal/version.version=$HELM_VERSION' -X 'helm.sh/helm/v4/internal/version.metadata=' -X 'helm.sh/helm/v4/internal/version.gitTreeState=clean'"
}
# Bump when the build recipe changes in a way the hashed files do not show.
recipe=3

stamp_of() { # module version
  { echo "$2 recipe=$recipe"; cat "$here/$1/go.mod" "$here/$1/go.sum"; } | sha256sum | cut -d' ' -f1
}
up_to_date() { # module version binaries...
  local module=$1 version=$2 b
  shift 2
  [[ -f "$bin/.$module.stamp" && "$(cat "$bin/.$module.stamp")" == "$(stamp_of "$module" "$version")" ]] || return 1
  for b in "$@"; do [[ -x "$bin/$b" ]] || return 1; done
}

k8s_ok=0; etcd_ok=0; helm_ok=0; koord_ok=0
up_to_date k8s "$K8S_VERSION" "${k8s_bins[@]}" && k8s_ok=1
up_to_date etcd "$ETCD_VERSION" etcd && etcd_ok=1
up_to_date helm "$HELM_VERSION" helm && helm_ok=1
up_to_date koord "$KOORD_VERSION" koord-scheduler && [[ -f "$bin/koordinator-crds/.complete" ]] && koord_ok=1
if (( k8s_ok && etcd_ok && helm_ok && koord_ok )); then
  exit 0
fi

# The newest `go` line of the two go.mod files is the oldest Go that can build them.
need_go=$(awk '$1 == "go" { print $2 }' "$here/k8s/go.mod" "$here/etcd/go.mod" "$here/helm/go.mod" "$here/koord/go.mod" | sort -V | tail -1)
if ! command -v go >/dev/null 2>&1; then
  echo "tools/build.sh: Go $need_go or newer is required to build the test cluster (etcd $ETCD_VERSION, kube-apiserver/kubectl/kube-scheduler/kube-controller-manager $K8S_VERSION, helm $HELM_VERSION) and \`go\` is not on PATH; install it from https://go.dev/dl/" >&2
  exit 3
fi
# GOTOOLCHAIN=local: never download a toolchain behind the user's back; an older Go fails
# with "go.mod requires go >= ...", which says what to install.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
have_go=$(go env GOVERSION)
if [[ "$(printf '%s\n%s\n' "go$need_go" "$have_go" | sort -V | head -1)" != "go$need_go" ]]; then
  echo "tools/build.sh: Go $need_go or newer is required (found $have_go); install it from https://go.dev/dl/" >&2
  exit 3
fi
mkdir -p "$bin"

if (( ! k8s_ok )); then
  echo "tools/build.sh: building ${k8s_bins[*]} $K8S_VERSION with $have_go into $bin (cold: several minutes)" >&2
  start=$(date +%s)
  (cd "$here/k8s" && go build -trimpath -ldflags "$(k8s_ldflags)" -o "$bin/" "${k8s_pkgs[@]}")
  stamp_of k8s "$K8S_VERSION" >"$bin/.k8s.stamp"
  echo "tools/build.sh: kubernetes binaries built in $(( $(date +%s) - start ))s" >&2
fi

if (( ! etcd_ok )); then
  echo "tools/build.sh: building etcd $ETCD_VERSION with $have_go into $bin" >&2
  start=$(date +%s)
  # The server module's root package is etcd's main package.
  (cd "$here/etcd" && go build -trimpath -ldflags "$(etcd_ldflags)" -o "$bin/etcd" go.etcd.io/etcd/server/v3)
  stamp_of etcd "$ETCD_VERSION" >"$bin/.etcd.stamp"
  echo "tools/build.sh: etcd built in $(( $(date +%s) - start ))s" >&2
fi

if (( ! helm_ok )); then
  echo "tools/build.sh: building helm $HELM_VERSION with $have_go into $bin" >&2
  start=$(date +%s)
  (cd "$here/helm" && go build -trimpath -ldflags "$(helm_ldflags)" -o "$bin/helm" helm.sh/helm/v4/cmd/helm)
  stamp_of helm "$HELM_VERSION" >"$bin/.helm.stamp"
  echo "tools/build.sh: helm built in $(( $(date +%s) - start ))s" >&2
fi

if (( ! koord_ok )); then
  echo "tools/build.sh: building koord-scheduler $KOORD_VERSION with $have_go into $bin (cold: several minutes)" >&2
  start=$(date +%s)
  (cd "$here/koord" && go build -trimpath -ldflags "-s -w" -o "$bin/koord-scheduler" github.com/koordinator-sh/koordinator/cmd/koord-scheduler)
  # koord-scheduler waits for its informers of Koordinator's kinds: its tests install the
  # CRDs of the same release, taken from the module it was built from.
  src=$(cd "$here/koord" && go list -m -f '{{.Dir}}' github.com/koordinator-sh/koordinator)
  rm -rf "$bin/koordinator-crds"
  mkdir -p "$bin/koordinator-crds"
  cp "$src"/config/crd/bases/*.yaml "$bin/koordinator-crds/"
  chmod u+w "$bin"/koordinator-crds/*.yaml
  touch "$bin/koordinator-crds/.complete"
  stamp_of koord "$KOORD_VERSION" >"$bin/.koord.stamp"
  echo "tools/build.sh: koord-scheduler built in $(( $(date +%s) - start ))s" >&2
fi
