#!/usr/bin/env bash
# Regenerates tools/k8s/go.mod and tools/etcd/go.mod (and their go.sum) for the versions in
# versions.env. The staging replace list is derived from k8s.io/kubernetes's own go.mod at the
# pinned tag: every `k8s.io/X => ./staging/src/k8s.io/X` becomes `k8s.io/X => k8s.io/X v0.MINOR.PATCH`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/versions.env"
export GOTOOLCHAIN=local
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
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
go mod tidy
cd "$here/etcd"
rm -f go.mod go.sum
go mod init berth.test/etcdtools >/dev/null 2>&1
go mod edit -go=1.25.0
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go mod tidy
