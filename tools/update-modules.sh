#!/usr/bin/env bash
# Regenerates tools/k8s/go.mod, tools/etcd/go.mod, tools/helm/go.mod and tools/koord/go.mod (and
# their go.sum) for the versions in versions.env. The staging replace list is derived from k8s.io/kubernetes's own go.mod at the
# pinned tag: every `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X => k8s.io/X v0.MINOR.PATCH`
# (k8s.io/kubernetes is not meant to be required as a module; its staging modules are published
# separately with v0 tags that mirror the v1 release).
#
#   tools/update-modules.sh            regenerate for versions.env as it is
#   tools/update-modules.sh --latest   first move both pins to the newest patch release of
#                                      their pinned minor that the module proxy serves
#
# Then run tools/build.sh (the stamps change, so it rebuilds) and commit versions.env,
# go.mod and go.sum.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local

if [[ "${1:-}" == "--latest" ]]; then
  . "$here/versions.env"
  newest() { # module current-version
    local minor="${2%.*}."
    go list -m -versions "$1" | tr ' ' '\n' | grep -F "$minor" | grep -v -- - | sort -V | tail -1
  }
  k8s=$(newest k8s.io/kubernetes "$K8S_VERSION")
  etcd=$(newest go.etcd.io/etcd/server/v3 "$ETCD_VERSION")
  helm=$(newest helm.sh/helm/v4 "$HELM_VERSION")
  sed -i -e "s/^K8S_VERSION=.*/K8S_VERSION=$k8s/" -e "s/^ETCD_VERSION=.*/ETCD_VERSION=$etcd/" \
    -e "s/^HELM_VERSION=.*/HELM_VERSION=$helm/" "$here/versions.env"
  echo "versions.env: K8S_VERSION=$k8s ETCD_VERSION=$etcd HELM_VERSION=$helm" >&2
fi
. "$here/versions.env"

staging="v0.${K8S_VERSION#v1.}"
upstream=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
cd "$here/k8s"
rm -f go.mod go.sum
go mod init berth.test/k8stools >/dev/null 2>&1
go_line=$(awk '$1 == "go" { print $2; exit }' "$upstream")
go mod edit -go="$go_line"
godebug=$(awk '$1 == "godebug" { print $2; exit }' "$upstream")
[[ -n "$godebug" ]] && go mod edit -godebug="$godebug"
for mod in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$upstream"); do
  go mod edit -replace="$mod=$mod@$staging"
done
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
go mod tidy
cd "$here/etcd"
rm -f go.mod go.sum
go mod init berth.test/etcdtools >/dev/null 2>&1
# `go get` raises this to whatever the etcd release requires.
go mod edit -go=1.25.0
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go mod tidy
cd "$here/helm"
rm -f go.mod go.sum
go mod init berth.test/helmtools >/dev/null 2>&1
# `go get` raises this to whatever the helm release requires.
go mod edit -go=1.25.0
go get -tool "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
go mod tidy
# koord-scheduler: Koordinator's module pins its Kubernetes dependencies with replace
# directives, which count only in the main module: copy them from its go.mod.
cd "$here/koord"
rm -f go.mod go.sum
koord_mod=$(go mod download -json "github.com/koordinator-sh/koordinator@$KOORD_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module berth.test/koordtools"
  echo
  echo "go $(awk '$1 == "go" { print $2; exit }' "$koord_mod")"
  echo
  echo "tool github.com/koordinator-sh/koordinator/cmd/koord-scheduler"
  echo
  echo "require github.com/koordinator-sh/koordinator $KOORD_VERSION"
  echo
  awk '/^replace \(/ { p = 1 } p { print } /^\)/ { p = 0 }' "$koord_mod"
} >go.mod
GOFLAGS=-mod=mod go mod tidy
