// Package kubernetes holds no code: its test validates the manifests in
// this directory offline (make test) with the checks of package
// manifestcheck, which deploy/helm's chart test shares.
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/tenurehq/tenure/deploy/kubernetes/manifestcheck"
)

func load(t *testing.T, glob string) manifestcheck.Objects {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests match %s: %v", glob, err)
	}
	var o manifestcheck.Objects
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := manifestcheck.DecodeAll(f, data, &o); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

func agentEnv(t *testing.T) map[string]bool {
	t.Helper()
	vars, err := manifestcheck.AgentEnv("../..")
	if err != nil {
		t.Fatal(err)
	}
	return vars
}

func TestAgentManifests(t *testing.T) {
	manifestcheck.CheckCluster(t.Errorf, load(t, "*.yaml"), agentEnv(t))
}

func TestEmbeddedManifest(t *testing.T) {
	o := load(t, "embedded/*.yaml")
	if len(o.StatefulSets) != 1 || len(o.PDBs) != 1 || len(o.Services) != 1 {
		t.Fatalf("want a StatefulSet, a PDB and a headless Service")
	}
	ss := o.StatefulSets[0]
	c := ss.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || manifestcheck.Port(c, c.ReadinessProbe.HTTPGet.Port) <= 0 {
		t.Error("embedded: want a readiness probe on /readyz at a container port")
	}
	if len(ss.Spec.VolumeClaimTemplates) == 0 || ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Error("embedded: want volumeClaimTemplates and Parallel pod management")
	}
	if !manifestcheck.Selects(o.PDBs[0].Spec.Selector.MatchLabels, ss.Spec.Template.Labels) || o.Services[0].Name != ss.Spec.ServiceName {
		t.Error("embedded: the PDB or the headless Service does not match the StatefulSet")
	}
}

// The checks fail on broken manifests.
func TestChecksCatchMistakes(t *testing.T) {
	var o manifestcheck.Objects
	err := manifestcheck.DecodeAll("typo", []byte("apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  replica: 3\n"), &o)
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("unknown field: %v", err)
	}
	data, err := os.ReadFile("voters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []struct{ from, to string }{
		{"path: /readyz", "path: /ready"},
		{"name: TENURE_VOTER\n", "name: TENURE_VOTERS\n"},
		{"127.0.0.1:7948", "127.0.0.1:7947"},
		{"value: always", "value: auto"},
	} {
		if !bytes.Contains(data, []byte(mutate.from)) {
			t.Fatalf("voters.yaml lacks %q", mutate.from)
		}
		var o manifestcheck.Objects
		if err := manifestcheck.DecodeAll("voters", bytes.Replace(data, []byte(mutate.from), []byte(mutate.to), 1), &o); err != nil {
			t.Fatal(err)
		}
		caught := false
		manifestcheck.CheckContainer(func(string, ...any) { caught = true }, "voters", o.StatefulSets[0].Spec.Template.Spec.Containers[0], agentEnv(t), o.StatefulSets[0].Spec.Template.Spec, "always")
		if !caught {
			t.Errorf("mutation %q -> %q not caught", mutate.from, mutate.to)
		}
	}
}

// CertificateRole refuses what issue 25 found: every voter's key in one
// Secret mounted by every voter pod, the CA key in a pod, and a pod that
// gets no certificate of its own.
func TestCertificateRoleCatchesSharedKeys(t *testing.T) {
	o := load(t, "voters.yaml")
	good := o.StatefulSets[0].Spec.Template.Spec
	check := func(spec corev1.PodSpec) (msgs []string) {
		manifestcheck.CertificateRole(func(f string, a ...any) { msgs = append(msgs, fmt.Sprintf(f, a...)) }, "voters", spec, false)
		return msgs
	}
	if msgs := check(good); len(msgs) != 0 {
		t.Fatalf("voters.yaml: %v", msgs)
	}
	shared := *good.DeepCopy()
	for i, v := range shared.Volumes {
		if v.Name == "tls" {
			shared.Volumes[i].VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tenure-voter-tls"}}
		}
	}
	if msgs := check(shared); len(msgs) != 2 || !strings.Contains(msgs[0], "every pod's key") {
		t.Errorf("one Secret with every voter's key: %v", msgs)
	}
	caInPod := *shared.DeepCopy()
	caInPod.InitContainers = []corev1.Container{{Name: "tls", Args: []string{"tls", "cert", "--dir", "/tls", "--ca-dir", "/ca", "--node", "$(POD_NAME)"}}}
	if msgs := check(caInPod); !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "--ca-dir") }) {
		t.Errorf("the CA key in the pod: %v", msgs)
	}
}
