// Package kubernetes holds no code: its test validates the manifests in
// this directory offline (make test).
package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// objects is every document of every manifest, decoded.
type objects struct {
	services     []*corev1.Service
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	pdbs         []*policyv1.PodDisruptionBudget
}

// decodeAll decodes every YAML document of data strictly (an unknown or
// misspelt field is an error) into the typed API struct of its kind.
func decodeAll(name string, data []byte, into *objects) error {
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return fmt.Errorf("%s doc %d: %v", name, i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			o := &corev1.Service{}
			into.services, obj = append(into.services, o), o
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			into.statefulSets, obj = append(into.statefulSets, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			into.deployments, obj = append(into.deployments, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			into.pdbs, obj = append(into.pdbs, o), o
		default:
			return fmt.Errorf("%s doc %d: unexpected kind %q %q", name, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("%s doc %d (%s): %v", name, i, tm.Kind, err)
		}
	}
	return nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func load(t *testing.T, glob string) objects {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests match %s: %v", glob, err)
	}
	var o objects
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeAll(f, data, &o); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// agentEnv returns the TENURE_* variables `tenure agent` reads: one per
// flag declared in node/flags.go (node.Config.RegisterFlags) and
// cmd/tenure/agentconfig.go (the agent's own; envName), plus TENURE_CONFIG.
func agentEnv(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{"TENURE_CONFIG": true}
	re := regexp.MustCompile(`fs\.\w+\([^,]+, "([a-z0-9-]+)"`)
	for _, file := range []string{"../../node/flags.go", "../../cmd/tenure/agentconfig.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			out["TENURE_"+strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_"))] = true
		}
	}
	if len(out) < 20 || !out["TENURE_VOTER"] || !out["TENURE_DATA_DIR"] {
		t.Fatalf("agentconfig.go parse found only %d variables: %v", len(out), out)
	}
	return out
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func port(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// checkContainer checks what every tenure agent container needs.
func checkContainer(errorf func(string, ...any), where string, c corev1.Container, agentVars map[string]bool, spec corev1.PodSpec, wantVoter string) {
	bad := func(format string, args ...any) { errorf("%s: %s", where, fmt.Sprintf(format, args...)) }
	seen := map[string]bool{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "TENURE_") && !agentVars[e.Name] {
			bad("env %s is not an agent setting (cmd/tenure/agentconfig.go)", e.Name)
		}
		for _, ref := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(e.Value, -1) {
			if !seen[ref[1]] {
				bad("env %s refers to $(%s), not defined before it", e.Name, ref[1])
			}
		}
		seen[e.Name] = true
	}
	if e, _ := env(c, "TENURE_VOTER"); e.Value != wantVoter {
		bad("TENURE_VOTER %q, want %q", e.Value, wantVoter)
	}
	for _, secret := range []string{"TENURE_ENCRYPT"} {
		e, ok := env(c, secret)
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			bad("%s must come from a Secret (valueFrom.secretKeyRef)", secret)
		}
	}
	if _, ok := env(c, "TENURE_TOKEN"); ok {
		bad("TENURE_TOKEN set: use TENURE_TOKEN_FILE from a mounted Secret")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	underMount := func(path string) (corev1.VolumeMount, bool) {
		for mp, m := range mounts {
			if strings.HasPrefix(path, mp+"/") {
				return m, true
			}
		}
		return corev1.VolumeMount{}, false
	}
	for _, name := range []string{"TENURE_TOKEN_FILE", "TENURE_TLS_CA", "TENURE_TLS_CERT", "TENURE_TLS_KEY"} {
		e, ok := env(c, name)
		if !ok {
			bad("%s not set", name)
			continue
		}
		if _, ok := underMount(e.Value); !ok {
			bad("%s=%s is under no volume mount", name, e.Value)
		}
	}
	if d, _ := env(c, "TENURE_DISKLESS"); d.Value == "true" {
		if e, ok := env(c, "TENURE_DATA_DIR"); ok {
			bad("TENURE_DISKLESS with TENURE_DATA_DIR %q: a disk-less member has no data dir", e.Value)
		}
		if v, _ := env(c, "TENURE_VOTER"); v.Value != "never" {
			bad("TENURE_DISKLESS with TENURE_VOTER %q: only members (never) run without a disk", v.Value)
		}
	} else if e, _ := env(c, "TENURE_DATA_DIR"); mounts[e.Value].Name == "" {
		bad("TENURE_DATA_DIR %q is not a volume mount", e.Value)
	}
	httpAddr, _ := env(c, "TENURE_HTTP_ADDR")
	_, hp, _ := strings.Cut(httpAddr.Value, ":")
	httpPort, err := strconv.Atoi(hp)
	if err != nil {
		bad("TENURE_HTTP_ADDR %q has no port", httpAddr.Value)
	}
	probe := func(kind string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			bad("%s probe: want httpGet %s", kind, path)
			return
		}
		if p.HTTPGet.Path != path || int(port(c, p.HTTPGet.Port)) != httpPort {
			bad("%s probe on %s port %v (%d), want %s on the HTTP API port %d", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), port(c, p.HTTPGet.Port), path, httpPort)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	wantStop := []string{"/tenure", "drain", "--addr", fmt.Sprintf("127.0.0.1:%d", httpPort)}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil || len(c.Lifecycle.PreStop.Exec.Command) < len(wantStop) || !slices.Equal(c.Lifecycle.PreStop.Exec.Command[:len(wantStop)], wantStop) {
		bad("preStop: want exec %q", wantStop)
	}
	for _, p := range []struct {
		name string
		port int32
	}{{"gossip-tcp", 7946}, {"gossip-udp", 7946}, {"raft", 7947}, {"http", int32(httpPort)}} {
		if got := port(c, intstr.FromString(p.name)); got != p.port {
			bad("container port %s = %d, want %d", p.name, got, p.port)
		}
	}
	if d, ok := env(c, "TENURE_DRAIN_TIMEOUT"); ok {
		var secs int
		if _, err := fmt.Sscanf(d.Value, "%ds", &secs); err != nil || spec.TerminationGracePeriodSeconds == nil || int64(secs) >= *spec.TerminationGracePeriodSeconds {
			bad("TENURE_DRAIN_TIMEOUT %s must end before terminationGracePeriodSeconds %v", d.Value, spec.TerminationGracePeriodSeconds)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok && m.Name != "data" {
			bad("volume mount %s has no volume", m.Name)
		}
	}
}

// certificateRole checks the certificate role a pod gets (docs/security.md,
// "Roles"): an init container that issues the agent's certificate with
// `tenure tls cert` issues a member certificate (--member) exactly when
// wantMember, for the pod's own name; a pod that must be a member has one.
func certificateRole(errorf func(string, ...any), where string, spec corev1.PodSpec, wantMember bool) {
	issued := false
	for _, ic := range spec.InitContainers {
		args := ic.Args
		if len(args) < 2 || args[0] != "tls" || args[1] != "cert" {
			continue
		}
		issued = true
		if member := slices.Contains(args, "--member"); member != wantMember {
			errorf("%s: init container %s issues a certificate with --member=%v, want %v (members get member certificates, voters node certificates)", where, ic.Name, member, wantMember)
		}
		if i := slices.Index(args, "--node"); i < 0 || i+1 >= len(args) || args[i+1] != "$(POD_NAME)" {
			errorf("%s: init container %s issues a certificate for %q, want --node $(POD_NAME)", where, ic.Name, args)
		}
		if slices.Contains(args, "--operator") {
			errorf("%s: init container %s issues an operator certificate", where, ic.Name)
		}
	}
	if wantMember && !issued {
		errorf("%s: no init container issues the pod's member certificate (tenure tls cert --member --node $(POD_NAME))", where)
	}
}

func selects(sel map[string]string, podLabels map[string]string) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels))
}

func TestAgentManifests(t *testing.T) {
	o := load(t, "*.yaml")
	agentVars := agentEnv(t)
	if len(o.statefulSets) != 1 || len(o.deployments) != 1 {
		t.Fatalf("want one voter StatefulSet and one member Deployment, got %d and %d", len(o.statefulSets), len(o.deployments))
	}
	voters, members := o.statefulSets[0], o.deployments[0]
	pods := map[string]map[string]string{"voters": voters.Spec.Template.Labels, "members": members.Spec.Template.Labels}

	// Voters: an odd number, with disks, all bootstrap voters.
	if r := voters.Spec.Replicas; r == nil || *r%2 == 0 || *r < 3 {
		t.Errorf("voters: replicas %v, want an odd number >= 3", r)
	}
	if voters.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("voters: podManagementPolicy %q: OrderedReady waits for a ready voter-0, which needs a quorum", voters.Spec.PodManagementPolicy)
	}
	if len(voters.Spec.VolumeClaimTemplates) != 1 || voters.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("voters: want one volumeClaimTemplate named data")
	}
	vc := voters.Spec.Template.Spec.Containers[0]
	checkContainer(t.Errorf, "voters", vc, agentVars, voters.Spec.Template.Spec, "always")
	if e, _ := env(vc, "TENURE_BOOTSTRAP_EXPECT"); voters.Spec.Replicas != nil && e.Value != strconv.Itoa(int(*voters.Spec.Replicas)) {
		t.Errorf("voters: TENURE_BOOTSTRAP_EXPECT %q, want the replica count %d", e.Value, *voters.Spec.Replicas)
	}
	if !selects(voters.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) {
		t.Errorf("voters: selector does not match the pod template")
	}

	certificateRole(t.Errorf, "voters", voters.Spec.Template.Spec, false)

	// Members: never vote, no disk, member certificates.
	mc := members.Spec.Template.Spec.Containers[0]
	checkContainer(t.Errorf, "members", mc, agentVars, members.Spec.Template.Spec, "never")
	certificateRole(t.Errorf, "members", members.Spec.Template.Spec, true)
	if e, _ := env(mc, "TENURE_DISKLESS"); e.Value != "true" {
		t.Errorf("members: TENURE_DISKLESS %q, want \"true\" (disk-less members, docs/operations.md)", e.Value)
	}
	for _, v := range members.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			t.Errorf("members: a data volume; disk-less members keep none")
		}
	}
	if !selects(members.Spec.Selector.MatchLabels, members.Spec.Template.Labels) {
		t.Errorf("members: selector does not match the pod template")
	}
	if selects(voters.Spec.Selector.MatchLabels, members.Spec.Template.Labels) || selects(members.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) {
		t.Errorf("the voter and member selectors overlap")
	}

	// Seeds are the voters' stable names through the headless Service.
	var headless *corev1.Service
	for _, s := range o.services {
		if s.Name == voters.Spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("voters: serviceName %q is not a headless Service with publishNotReadyAddresses", voters.Spec.ServiceName)
	}
	for where, c := range map[string]corev1.Container{"voters": vc, "members": mc} {
		seeds, _ := env(c, "TENURE_SEEDS")
		for i := range int(*voters.Spec.Replicas) {
			want := fmt.Sprintf("%s-%d.%s:7946", voters.Name, i, headless.Name)
			if !slices.Contains(strings.Split(seeds.Value, ","), want) {
				t.Errorf("%s: TENURE_SEEDS %q lacks %s", where, seeds.Value, want)
			}
		}
	}

	// Every Service selects pods and targets ports they have.
	for _, s := range o.services {
		matched := 0
		for name, l := range pods {
			if !selects(s.Spec.Selector, l) {
				continue
			}
			matched++
			c := vc
			if name == "members" {
				c = mc
			}
			for _, p := range s.Spec.Ports {
				if port(c, p.TargetPort) <= 0 {
					t.Errorf("service %s port %s: target %s is no port of the %s", s.Name, p.Name, p.TargetPort.String(), name)
				}
			}
		}
		if matched == 0 {
			t.Errorf("service %s selects no pods", s.Name)
		}
	}

	// One voter down at a time.
	var votersPDB bool
	for _, p := range o.pdbs {
		if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) && !selects(p.Spec.Selector.MatchLabels, members.Spec.Template.Labels) {
			votersPDB = true
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PDB %s: maxUnavailable %v, want 1", p.Name, p.Spec.MaxUnavailable)
			}
		}
	}
	if !votersPDB {
		t.Error("no PodDisruptionBudget selects the voters (and only them)")
	}
}

func TestEmbeddedManifest(t *testing.T) {
	o := load(t, "embedded/*.yaml")
	if len(o.statefulSets) != 1 || len(o.pdbs) != 1 || len(o.services) != 1 {
		t.Fatalf("want a StatefulSet, a PDB and a headless Service")
	}
	ss := o.statefulSets[0]
	c := ss.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || port(c, c.ReadinessProbe.HTTPGet.Port) <= 0 {
		t.Error("embedded: want a readiness probe on /readyz at a container port")
	}
	if len(ss.Spec.VolumeClaimTemplates) == 0 || ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Error("embedded: want volumeClaimTemplates and Parallel pod management")
	}
	if !selects(o.pdbs[0].Spec.Selector.MatchLabels, ss.Spec.Template.Labels) || o.services[0].Name != ss.Spec.ServiceName {
		t.Error("embedded: the PDB or the headless Service does not match the StatefulSet")
	}
}

// The checks fail on broken manifests.
func TestChecksCatchMistakes(t *testing.T) {
	var o objects
	err := decodeAll("typo", []byte("apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  replica: 3\n"), &o)
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
		var o objects
		if err := decodeAll("voters", bytes.Replace(data, []byte(mutate.from), []byte(mutate.to), 1), &o); err != nil {
			t.Fatal(err)
		}
		caught := false
		checkContainer(func(string, ...any) { caught = true }, "voters", o.statefulSets[0].Spec.Template.Spec.Containers[0], agentEnv(t), o.statefulSets[0].Spec.Template.Spec, "always")
		if !caught {
			t.Errorf("mutation %q -> %q not caught", mutate.from, mutate.to)
		}
	}
	// A member pod with a node certificate, or none issued, is caught.
	mdata, err := os.ReadFile("members.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []struct{ from, to string }{
		{`"cert", "--member",`, `"cert",`},
		{`args: ["tls", "cert"`, `args: ["version"`},
	} {
		if !bytes.Contains(mdata, []byte(mutate.from)) {
			t.Fatalf("members.yaml lacks %q", mutate.from)
		}
		var o objects
		if err := decodeAll("members", bytes.Replace(mdata, []byte(mutate.from), []byte(mutate.to), 1), &o); err != nil {
			t.Fatal(err)
		}
		caught := false
		certificateRole(func(string, ...any) { caught = true }, "members", o.deployments[0].Spec.Template.Spec, true)
		if !caught {
			t.Errorf("members mutation %q -> %q not caught", mutate.from, mutate.to)
		}
	}
}
