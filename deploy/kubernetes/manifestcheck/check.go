// Package manifestcheck holds the checks of tenure's Kubernetes objects
// that deploy/kubernetes' manifests and deploy/helm's chart share: strict
// decoding into the typed k8s.io/api structs, the agent container's
// settings against the agent's real flags, and the cluster's shape.
package manifestcheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Objects is every document of every manifest, decoded.
type Objects struct {
	Services     []*corev1.Service
	StatefulSets []*appsv1.StatefulSet
	Deployments  []*appsv1.Deployment
	PDBs         []*policyv1.PodDisruptionBudget
	// OtherKinds, set before DecodeAll, admits more kinds ("apiVersion
	// Kind" → a new value to decode a document into, strictly); Other
	// holds them.
	OtherKinds map[string]func() any
	Other      []any
}

// DecodeAll decodes every YAML document of data strictly (an unknown or
// misspelt field is an error) into the typed API struct of its kind.
func DecodeAll(name string, data []byte, into *Objects) error {
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
			obj = appendNew(&into.Services)
		case "apps/v1 StatefulSet":
			obj = appendNew(&into.StatefulSets)
		case "apps/v1 Deployment":
			obj = appendNew(&into.Deployments)
		case "policy/v1 PodDisruptionBudget":
			obj = appendNew(&into.PDBs)
		default:
			if mk, ok := into.OtherKinds[tm.APIVersion+" "+tm.Kind]; ok {
				o := mk()
				into.Other, obj = append(into.Other, o), o
				break
			}
			return fmt.Errorf("%s doc %d: unexpected kind %q %q", name, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return fmt.Errorf("%s doc %d (%s): %v", name, i, tm.Kind, err)
		}
	}
	return nil
}

// appendNew appends a new zero *T to list and returns it to decode into.
func appendNew[T any](list *[]*T) any {
	o := new(T)
	*list = append(*list, o)
	return o
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

// AgentEnv returns the TENURE_* variables `tenure agent` reads: one per
// flag declared in node/flags.go (node.Config.RegisterFlags) and
// cmd/tenure/agentconfig.go (the agent's own; envName), plus TENURE_CONFIG.
// root is the repository's root directory.
func AgentEnv(root string) (map[string]bool, error) {
	out := map[string]bool{"TENURE_CONFIG": true}
	re := regexp.MustCompile(`fs\.\w+\([^,]+, "([a-z0-9-]+)"`)
	for _, file := range []string{"node/flags.go", "cmd/tenure/agentconfig.go"} {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			out["TENURE_"+strings.ToUpper(strings.ReplaceAll(string(m[1]), "-", "_"))] = true
		}
	}
	if len(out) < 20 || !out["TENURE_VOTER"] || !out["TENURE_DATA_DIR"] {
		return nil, fmt.Errorf("agentconfig.go parse found only %d variables: %v", len(out), out)
	}
	return out, nil
}

// Env is c's variable name.
func Env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// Port is the number of c's port p (by number or name); -1 if none.
func Port(c corev1.Container, p intstr.IntOrString) int32 {
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

// CheckContainer checks what every tenure agent container needs.
func CheckContainer(errorf func(string, ...any), where string, c corev1.Container, agentVars map[string]bool, spec corev1.PodSpec, wantVoter string) {
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
	if e, _ := Env(c, "TENURE_VOTER"); e.Value != wantVoter {
		bad("TENURE_VOTER %q, want %q", e.Value, wantVoter)
	}
	for _, secret := range []string{"TENURE_ENCRYPT"} {
		e, ok := Env(c, secret)
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			bad("%s must come from a Secret (valueFrom.secretKeyRef)", secret)
		}
	}
	if _, ok := Env(c, "TENURE_TOKEN"); ok {
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
		e, ok := Env(c, name)
		if !ok {
			bad("%s not set", name)
			continue
		}
		if _, ok := underMount(e.Value); !ok {
			bad("%s=%s is under no volume mount", name, e.Value)
		}
	}
	if d, _ := Env(c, "TENURE_DISKLESS"); d.Value == "true" {
		if e, ok := Env(c, "TENURE_DATA_DIR"); ok {
			bad("TENURE_DISKLESS with TENURE_DATA_DIR %q: a disk-less member has no data dir", e.Value)
		}
		if v, _ := Env(c, "TENURE_VOTER"); v.Value != "never" {
			bad("TENURE_DISKLESS with TENURE_VOTER %q: only members (never) run without a disk", v.Value)
		}
	} else if e, _ := Env(c, "TENURE_DATA_DIR"); mounts[e.Value].Name == "" {
		bad("TENURE_DATA_DIR %q is not a volume mount", e.Value)
	}
	httpAddr, _ := Env(c, "TENURE_HTTP_ADDR")
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
		if p.HTTPGet.Path != path || int(Port(c, p.HTTPGet.Port)) != httpPort {
			bad("%s probe on %s port %v (%d), want %s on the HTTP API port %d", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), Port(c, p.HTTPGet.Port), path, httpPort)
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
		if got := Port(c, intstr.FromString(p.name)); got != p.port {
			bad("container port %s = %d, want %d", p.name, got, p.port)
		}
	}
	if d, ok := Env(c, "TENURE_DRAIN_TIMEOUT"); ok {
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

// Selects reports whether the selector sel matches podLabels.
func Selects(sel map[string]string, podLabels map[string]string) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels))
}

// CheckCluster checks a voter StatefulSet, a member Deployment, their
// Services and the voters' PodDisruptionBudget: what docs/operations.md
// relies on (voters: an odd number with disks, bootstrap voters; members:
// never vote, disk-less; seeds through the headless Service; Services
// target ports the pods have; one voter down at a time).
func CheckCluster(errorf func(string, ...any), o Objects, agentVars map[string]bool) {
	if len(o.StatefulSets) != 1 || len(o.Deployments) != 1 {
		errorf("want one voter StatefulSet and one member Deployment, got %d and %d", len(o.StatefulSets), len(o.Deployments))
		return
	}
	voters, members := o.StatefulSets[0], o.Deployments[0]
	pods := map[string]map[string]string{"voters": voters.Spec.Template.Labels, "members": members.Spec.Template.Labels}

	// Voters: an odd number, with disks, all bootstrap voters.
	if r := voters.Spec.Replicas; r == nil || *r%2 == 0 || *r < 3 {
		errorf("voters: replicas %v, want an odd number >= 3", r)
		if r == nil {
			return
		}
	}
	if voters.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		errorf("voters: podManagementPolicy %q: OrderedReady waits for a ready voter-0, which needs a quorum", voters.Spec.PodManagementPolicy)
	}
	if len(voters.Spec.VolumeClaimTemplates) != 1 || voters.Spec.VolumeClaimTemplates[0].Name != "data" {
		errorf("voters: want one volumeClaimTemplate named data")
	}
	vc := voters.Spec.Template.Spec.Containers[0]
	CheckContainer(errorf, "voters", vc, agentVars, voters.Spec.Template.Spec, "always")
	if e, _ := Env(vc, "TENURE_BOOTSTRAP_EXPECT"); voters.Spec.Replicas != nil && e.Value != strconv.Itoa(int(*voters.Spec.Replicas)) {
		errorf("voters: TENURE_BOOTSTRAP_EXPECT %q, want the replica count %d", e.Value, *voters.Spec.Replicas)
	}
	if !Selects(voters.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) {
		errorf("voters: selector does not match the pod template")
	}
	CertificateRole(errorf, "voters", voters.Spec.Template.Spec, false)

	// Members: never vote, no disk, member certificates.
	mc := members.Spec.Template.Spec.Containers[0]
	CheckContainer(errorf, "members", mc, agentVars, members.Spec.Template.Spec, "never")
	CertificateRole(errorf, "members", members.Spec.Template.Spec, true)
	if e, _ := Env(mc, "TENURE_DISKLESS"); e.Value != "true" {
		errorf("members: TENURE_DISKLESS %q, want \"true\" (disk-less members, docs/operations.md)", e.Value)
	}
	for _, v := range members.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			errorf("members: a data volume; disk-less members keep none")
		}
	}
	if !Selects(members.Spec.Selector.MatchLabels, members.Spec.Template.Labels) {
		errorf("members: selector does not match the pod template")
	}
	if Selects(voters.Spec.Selector.MatchLabels, members.Spec.Template.Labels) || Selects(members.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) {
		errorf("the voter and member selectors overlap")
	}

	// Seeds are the voters' stable names through the headless Service.
	var headless *corev1.Service
	for _, s := range o.Services {
		if s.Name == voters.Spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		errorf("voters: serviceName %q is not a headless Service with publishNotReadyAddresses", voters.Spec.ServiceName)
		return
	}
	for where, c := range map[string]corev1.Container{"voters": vc, "members": mc} {
		seeds, _ := Env(c, "TENURE_SEEDS")
		for i := range int(*voters.Spec.Replicas) {
			want := fmt.Sprintf("%s-%d.%s:7946", voters.Name, i, headless.Name)
			if !slices.Contains(strings.Split(seeds.Value, ","), want) {
				errorf("%s: TENURE_SEEDS %q lacks %s", where, seeds.Value, want)
			}
		}
	}

	// Every Service selects pods and targets ports they have.
	for _, s := range o.Services {
		matched := 0
		for name, l := range pods {
			if !Selects(s.Spec.Selector, l) {
				continue
			}
			matched++
			c := vc
			if name == "members" {
				c = mc
			}
			for _, p := range s.Spec.Ports {
				if Port(c, p.TargetPort) <= 0 {
					errorf("service %s port %s: target %s is no port of the %s", s.Name, p.Name, p.TargetPort.String(), name)
				}
			}
		}
		if matched == 0 {
			errorf("service %s selects no pods", s.Name)
		}
	}

	// One voter down at a time.
	var votersPDB bool
	for _, p := range o.PDBs {
		if p.Spec.Selector != nil && Selects(p.Spec.Selector.MatchLabels, voters.Spec.Template.Labels) && !Selects(p.Spec.Selector.MatchLabels, members.Spec.Template.Labels) {
			votersPDB = true
			if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.IntValue() != 1 {
				errorf("PDB %s: maxUnavailable %v, want 1", p.Name, p.Spec.MaxUnavailable)
			}
		}
	}
	if !votersPDB {
		errorf("no PodDisruptionBudget selects the voters (and only them)")
	}
}

// CertificateRole checks the certificate role a pod gets (docs/security.md,
// "Roles"): members get member certificates (tenure://member/<pod>), voters
// node certificates (tenure://node/<pod>). Two ways to issue one are
// understood: an init container running `tenure tls cert` (--member exactly
// when wantMember, --node $(POD_NAME), never --operator), and a cert-manager
// CSI volume whose csi.cert-manager.io/uri-sans names the pod in the right
// role. Every pod must get its own key (issue 25): a pod with neither is
// an error, as is a TENURE_TLS_KEY on a Secret volume (one Secret, mounted
// by every pod of the set, holds every pod's key) and a CA key in the pod
// (an init container with --ca-dir: whoever holds one pod holds the CA).
func CertificateRole(errorf func(string, ...any), where string, spec corev1.PodSpec, wantMember bool) {
	issued := false
	if len(spec.Containers) > 0 {
		if key, ok := Env(spec.Containers[0], "TENURE_TLS_KEY"); ok {
			if v, ok := volumeAt(spec, spec.Containers[0], path.Dir(key.Value)); ok && v.Secret != nil {
				errorf("%s: TENURE_TLS_KEY %s is on Secret volume %s (secret %s): every pod of the set mounts every pod's key; "+
					"issue each pod its own (cert-manager's CSI driver, csi.cert-manager.io)", where, key.Value, v.Name, v.Secret.SecretName)
			}
		}
	}
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
		if slices.Contains(args, "--ca-dir") {
			errorf("%s: init container %s signs with the CA key mounted in the pod (--ca-dir): whoever holds one pod can issue any identity; "+
				"have a signer outside the pod sign it (cert-manager's CSI driver, csi.cert-manager.io)", where, ic.Name)
		}
	}
	want := "tenure://node/${POD_NAME}"
	if wantMember {
		want = "tenure://member/${POD_NAME}"
	}
	for _, v := range spec.Volumes {
		if v.CSI == nil || v.CSI.Driver != "csi.cert-manager.io" {
			continue
		}
		issued = true
		if got := v.CSI.VolumeAttributes["csi.cert-manager.io/uri-sans"]; got != want {
			errorf("%s: volume %s asks cert-manager for uri-sans %q, want %q", where, v.Name, got, want)
		}
	}
	if !issued {
		errorf("%s: nothing issues the pod its own certificate and key (a cert-manager CSI volume with uri-sans %s)", where, want)
	}
}

// volumeAt is the pod volume c mounts at dir.
func volumeAt(spec corev1.PodSpec, c corev1.Container, dir string) (corev1.Volume, bool) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				return v, true
			}
		}
	}
	return corev1.Volume{}, false
}
