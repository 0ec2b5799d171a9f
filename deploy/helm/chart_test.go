// Package helm holds no code: its test renders the chart in ./tenure with
// Helm's own library, offline, and validates what it renders (make test).
package helm

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenurehq/tenure/deploy/kubernetes/manifestcheck"
)

const chartDir = "tenure"

// issuer is the part of cert-manager's Issuer (cert-manager.io/v1) the
// chart renders: decoding is strict, so a misspelt field fails.
type issuer struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		CA struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// render renders the chart as `helm install NAME` with vals over its
// defaults would, and returns the rendered files by name.
func render(t *testing.T, ch *chart.Chart, name string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	values, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: name, Namespace: "tenure", Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, values)
}

// decode decodes every rendered manifest strictly into the typed structs.
func decode(t *testing.T, files map[string]string) manifestcheck.Objects {
	t.Helper()
	o := manifestcheck.Objects{OtherKinds: map[string]func() any{"cert-manager.io/v1 Issuer": func() any { return &issuer{} }}}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if path.Ext(name) != ".yaml" || strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		if err := manifestcheck.DecodeAll(name, []byte(files[name]), &o); err != nil {
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

// TestChartRenders renders the chart with its defaults and with other
// values, and runs deploy/kubernetes' checks (the agent container against
// the agent's flags, the cluster's shape) plus the chart's own: a key per
// pod from cert-manager's CSI driver naming the pod, tokens by scope from
// one Secret, the members' PodDisruptionBudget.
func TestChartRenders(t *testing.T) {
	ch := loadChart(t)
	agentVars := agentEnv(t)
	for _, c := range []struct {
		name    string
		release string
		vals    map[string]any
	}{
		{"defaults", "prod", nil},
		{"five voters, other ports", "tenure", map[string]any{
			"voters":  map[string]any{"replicas": 5},
			"members": map[string]any{"replicas": 10},
			"ports":   map[string]any{"http": 9000},
			"tls":     map[string]any{"createIssuer": false, "issuer": map[string]any{"kind": "ClusterIssuer", "name": "corp-ca"}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			files, err := render(t, ch, c.release, c.vals)
			if err != nil {
				t.Fatal(err)
			}
			o := decode(t, files)
			manifestcheck.CheckCluster(t.Errorf, o, agentVars)
			if t.Failed() {
				return
			}
			values, _ := chartutil.CoalesceValues(ch, c.vals)
			issuerName, _ := values.PathValue("tls.issuer.name")
			issuerKind, _ := values.PathValue("tls.issuer.kind")
			tokens, _ := values.PathValue("secrets.tokens")
			createIssuer, _ := values.PathValue("tls.createIssuer")
			for where, spec := range map[string]corev1.PodSpec{"voters": o.StatefulSets[0].Spec.Template.Spec, "members": o.Deployments[0].Spec.Template.Spec} {
				checkPod(t, where, spec, issuerName, issuerKind, tokens)
			}
			var issuers []*issuer
			for _, x := range o.Other {
				issuers = append(issuers, x.(*issuer))
			}
			switch {
			case createIssuer == true && (len(issuers) != 1 || issuers[0].Metadata.Name != issuerName || issuers[0].Spec.CA.SecretName == ""):
				t.Errorf("want one CA Issuer %v, got %+v", issuerName, issuers)
			case createIssuer == false && len(issuers) != 0:
				t.Errorf("createIssuer false, yet %d Issuers", len(issuers))
			}
			var membersPDB bool
			for _, p := range o.PDBs {
				if p.Spec.Selector != nil && manifestcheck.Selects(p.Spec.Selector.MatchLabels, o.Deployments[0].Spec.Template.Labels) {
					membersPDB = true
				}
			}
			if !membersPDB {
				t.Error("no PodDisruptionBudget selects the members")
			}
		})
	}
}

// checkPod checks the chart's TLS and token volumes of one pod spec.
func checkPod(t *testing.T, where string, spec corev1.PodSpec, issuerName, issuerKind, tokens any) {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	tls := vols["tls"].CSI
	if tls == nil || tls.Driver != "csi.cert-manager.io" {
		t.Fatalf("%s: volume tls is not cert-manager's CSI driver: %+v", where, vols["tls"])
	}
	a := tls.VolumeAttributes
	if a["csi.cert-manager.io/uri-sans"] != "tenure://node/${POD_NAME}" {
		t.Errorf("%s: uri-sans %q: the certificate must name the pod (its node id) as tenure://node/<id>", where, a["csi.cert-manager.io/uri-sans"])
	}
	if a["csi.cert-manager.io/issuer-name"] != issuerName || a["csi.cert-manager.io/issuer-kind"] != issuerKind {
		t.Errorf("%s: issuer %s/%s, want %v/%v", where, a["csi.cert-manager.io/issuer-kind"], a["csi.cert-manager.io/issuer-name"], issuerKind, issuerName)
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !strings.Contains(a["csi.cert-manager.io/key-usages"], u) {
			t.Errorf("%s: key-usages %q lack %q (mutual TLS)", where, a["csi.cert-manager.io/key-usages"], u)
		}
	}
	tok := vols["api-tokens"].Secret
	if tok == nil || tok.SecretName != tokens {
		t.Fatalf("%s: volume api-tokens is not Secret %v", where, tokens)
	}
	var keys []string
	for _, it := range tok.Items {
		keys = append(keys, it.Key)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"admin", "jobs", "read"}) {
		t.Errorf("%s: token Secret items %v, want admin, jobs, read", where, keys)
	}
	c := spec.Containers[0]
	for name, want := range map[string]string{
		"TENURE_TOKEN_FILE": "/secrets/api/admin", "TENURE_READ_TOKEN_FILE": "/secrets/api/read",
		"TENURE_TLS_CA": "/tls/ca.crt", "TENURE_TLS_CERT": "/tls/tls.crt", "TENURE_TLS_KEY": "/tls/tls.key",
	} {
		if e, _ := manifestcheck.Env(c, name); e.Value != want {
			t.Errorf("%s: %s=%q, want %q", where, name, e.Value, want)
		}
	}
}

// TestChartRefusesBadValues: values that make a broken cluster fail to
// render, with a message naming the value.
func TestChartRefusesBadValues(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"voters": map[string]any{"replicas": 4}}, "voters.replicas 4"},
		{map[string]any{"voters": map[string]any{"replicas": 1}}, "voters.replicas 1"},
		{map[string]any{"tls": map[string]any{"issuer": map[string]any{"kind": "ClusterIssuer"}}}, "tls.createIssuer"},
	} {
		if _, err := render(t, ch, "prod", c.vals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one naming %q", c.vals, err, c.want)
		}
	}
}

// TestChartLint runs Helm's own chart linter (helm lint --strict).
func TestChartLint(t *testing.T) {
	l := lint.All(chartDir, nil, "tenure", true)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// TestChartChecksCatchMistakes: the checks fail on a broken render.
func TestChartChecksCatchMistakes(t *testing.T) {
	ch := loadChart(t)
	files, err := render(t, ch, "prod", nil)
	if err != nil {
		t.Fatal(err)
	}
	agentVars := agentEnv(t)
	for _, m := range []struct{ file, from, to string }{
		{"tenure/templates/voters.yaml", "path: /readyz", "path: /ready"},
		{"tenure/templates/members.yaml", "value: never", "value: auto"},
		{"tenure/templates/voters.yaml", "podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady"},
		{"tenure/templates/services.yaml", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false"},
		{"tenure/templates/voters.yaml", "name: TENURE_DATA_DIR", "name: TENURE_DATADIR"},
	} {
		broken := maps.Clone(files)
		if !strings.Contains(broken[m.file], m.from) {
			t.Fatalf("%s lacks %q", m.file, m.from)
		}
		broken[m.file] = strings.Replace(broken[m.file], m.from, m.to, 1)
		caught := false
		manifestcheck.CheckCluster(func(string, ...any) { caught = true }, decode(t, broken), agentVars)
		if !caught {
			t.Errorf("%s: %q -> %q not caught", m.file, m.from, m.to)
		}
	}
}
