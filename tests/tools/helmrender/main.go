// Command helmrender renders a Helm chart directory the way `helm template` does,
// for tests on machines where the helm binary cannot be installed.
//
// It is built by the test suite from this one file in GOPATH mode against the
// Debian packages golang-github-masterminds-sprig-dev and golang-k8s-sigs-yaml-dev
// (the same template functions and YAML library Helm uses), and implements the
// parts of Helm that charts see:
//
//   - values: the chart's values.yaml deep-merged with each -f file in order
//     (maps merge, anything else is replaced, null deletes a key); numbers are
//     float64, as in Helm, because values go through JSON.
//   - built-in objects: .Values, .Release, .Chart, .Capabilities, .Template, .Files.
//   - functions: sprig (without env/expandenv, as Helm removes them), plus
//     include, tpl, required, fail, toYaml, fromYaml, fromYamlArray, toJson,
//     fromJson, fromJsonArray and lookup (always empty, as in `helm template`).
//   - templates/*: every file not starting with "_" is rendered, as a YAML
//     stream with "# Source:" comments; -notes renders only templates/NOTES.txt.
//   - -strict makes a missing map key an error (like `helm lint --strict`).
//
// Schema validation (values.schema.json) is left to the caller.
//
// Usage: helmrender -chart DIR [-f values.yaml]... [-name R] [-namespace NS]
//
//	[-kube-version 1.30.0] [-api-versions group/version/Kind]... [-notes] [-strict]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// Limits recursion through include/tpl the way Helm does, so a template that
// includes itself fails instead of exhausting the stack.
const maxIncludeDepth = 1000

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// chartMeta is the part of Chart.yaml templates read (as .Chart.Name and so on).
type chartMeta struct {
	APIVersion   string            `json:"apiVersion"`
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	AppVersion   string            `json:"appVersion"`
	Description  string            `json:"description"`
	Type         string            `json:"type"`
	KubeVersion  string            `json:"kubeVersion"`
	Home         string            `json:"home"`
	Icon         string            `json:"icon"`
	Keywords     []string          `json:"keywords"`
	Sources      []string          `json:"sources"`
	Annotations  map[string]string `json:"annotations"`
	Deprecated   bool              `json:"deprecated"`
	Maintainers  []interface{}     `json:"maintainers"`
	Dependencies []interface{}     `json:"dependencies"`
}

type release struct {
	Name      string
	Namespace string
	Service   string
	Revision  int
	IsInstall bool
	IsUpgrade bool
}

type kubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k kubeVersion) String() string { return k.Version }

// versionSet is .Capabilities.APIVersions.
type versionSet []string

// Has reports whether the cluster serves an API version ("apps/v1") or a
// resource ("monitoring.coreos.com/v1/ServiceMonitor").
func (v versionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions versionSet
	HelmVersion map[string]string
}

type templateInfo struct {
	Name     string
	BasePath string
}

// files is .Files: every chart file outside templates/ and the chart's own
// metadata, minus what .helmignore excludes.
type files map[string][]byte

func (f files) Get(name string) string { return string(f[name]) }

func (f files) GetBytes(name string) []byte { return f[name] }

func (f files) Glob(pattern string) files {
	out := files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

func (f files) Lines(name string) []string {
	s := string(f[name])
	if s == "" {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func (f files) sortedNames() []string {
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (f files) AsConfig() string {
	m := map[string]string{}
	for _, name := range f.sortedNames() {
		m[path.Base(name)] = string(f[name])
	}
	return toYAML(m)
}

func (f files) AsSecrets() string {
	m := map[string][]byte{}
	for _, name := range f.sortedNames() {
		m[path.Base(name)] = f[name]
	}
	return toYAML(m)
}

func toYAML(v interface{}) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(data), "\n")
}

// unmarshal is yaml.Unmarshal or json.Unmarshal.
type unmarshal func(data []byte, v interface{}) error

func yamlUnmarshal(data []byte, v interface{}) error { return yaml.Unmarshal(data, v) }

// decodeMap and decodeList behave like Helm's from* functions: a document that
// does not parse gives its error as the value instead of failing the render.
func decodeMap(decode unmarshal) func(string) map[string]interface{} {
	return func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := decode([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
}

func decodeList(decode unmarshal) func(string) []interface{} {
	return func(s string) []interface{} {
		a := []interface{}{}
		if err := decode([]byte(s), &a); err != nil {
			a = []interface{}{err.Error()}
		}
		return a
	}
}

func toJSON(v interface{}) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return v, errors.New(msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return v, errors.New(msg)
	}
	return v, nil
}

// merge returns base overlaid with over: maps merge recursively, a nil in
// over deletes the key, every other value replaces.
func merge(base, over map[string]interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		bm, bok := out[k].(map[string]interface{})
		om, ook := v.(map[string]interface{})
		if bok && ook {
			out[k] = merge(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

func readYAMLMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return m, nil
}

// ignoreRules are .helmignore patterns; supported forms: "name", "*.ext",
// "dir/" (a directory anywhere) and "path/with/slash" (from the chart root).
type ignoreRules []string

func readIgnore(chartDir string) ignoreRules {
	data, err := os.ReadFile(filepath.Join(chartDir, ".helmignore"))
	if err != nil {
		return nil
	}
	var rules ignoreRules
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rules = append(rules, line)
	}
	return rules
}

func (r ignoreRules) ignored(rel string, isDir bool) bool {
	base := path.Base(rel)
	for _, rule := range r {
		dirOnly := strings.HasSuffix(rule, "/")
		rule = strings.TrimSuffix(rule, "/")
		if dirOnly && !isDir {
			continue
		}
		if strings.Contains(rule, "/") {
			if ok, _ := path.Match(strings.TrimPrefix(rule, "/"), rel); ok {
				return true
			}
		} else if ok, _ := path.Match(rule, base); ok {
			return true
		}
	}
	return false
}

type chart struct {
	dir       string
	meta      chartMeta
	values    map[string]interface{}
	templates map[string]string // "templates/x.yaml" -> text
	files     files
}

func loadChart(dir string) (*chart, error) {
	c := &chart{dir: dir, templates: map[string]string{}, files: files{}}
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.UnmarshalStrict(raw, &c.meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if c.meta.Name == "" || c.meta.Version == "" || c.meta.APIVersion != "v2" {
		return nil, errors.New("Chart.yaml: apiVersion v2, name and version are required")
	}
	if c.values, err = readYAMLMap(filepath.Join(dir, "values.yaml")); err != nil {
		return nil, err
	}
	ignore := readIgnore(dir)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignore.ignored(rel, info.IsDir()) {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.templates[rel] = string(data)
		case rel == "Chart.yaml", rel == "values.yaml", rel == "values.schema.json",
			rel == ".helmignore", strings.HasPrefix(rel, "charts/"):
		default:
			c.files[rel] = data
		}
		return nil
	})
	return c, err
}

type renderer struct {
	chart  *chart
	tmpl   *template.Template
	top    map[string]interface{}
	strict bool
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	depth := 0
	extra := template.FuncMap{
		"toYaml":        toYAML,
		"fromYaml":      decodeMap(yamlUnmarshal),
		"fromYamlArray": decodeList(yamlUnmarshal),
		"toJson":        toJSON,
		"fromJson":      decodeMap(json.Unmarshal),
		"fromJsonArray": decodeList(json.Unmarshal),
		"required":      required,
		"lookup": func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
			return map[string]interface{}{}, nil
		},
		"include": func(name string, data interface{}) (string, error) {
			if depth > maxIncludeDepth {
				return "", fmt.Errorf("include %q: rendering exceeded depth %d", name, maxIncludeDepth)
			}
			depth++
			defer func() { depth-- }()
			var buf bytes.Buffer
			if err := r.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"tpl": func(text string, data interface{}) (string, error) {
			if depth > maxIncludeDepth {
				return "", fmt.Errorf("tpl: rendering exceeded depth %d", maxIncludeDepth)
			}
			depth++
			defer func() { depth-- }()
			clone, err := r.tmpl.Clone()
			if err != nil {
				return "", err
			}
			t, err := clone.New("tpl").Parse(text)
			if err != nil {
				return "", fmt.Errorf("tpl: %w", err)
			}
			var buf bytes.Buffer
			if err := t.Execute(&buf, data); err != nil {
				return "", fmt.Errorf("tpl: %w", err)
			}
			return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
		},
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

func (r *renderer) parse() error {
	r.tmpl = template.New("chart")
	if r.strict {
		r.tmpl.Option("missingkey=error")
	} else {
		r.tmpl.Option("missingkey=zero")
	}
	r.tmpl.Funcs(r.funcs())
	names := make([]string, 0, len(r.chart.templates))
	for name := range r.chart.templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		full := r.chart.meta.Name + "/" + name
		if _, err := r.tmpl.New(full).Parse(r.chart.templates[name]); err != nil {
			return err
		}
	}
	return nil
}

// render executes one template with .Template set for it.
func (r *renderer) render(name string) (string, error) {
	full := r.chart.meta.Name + "/" + name
	data := map[string]interface{}{}
	for k, v := range r.top {
		data[k] = v
	}
	data["Template"] = templateInfo{Name: full, BasePath: r.chart.meta.Name + "/templates"}
	var buf bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&buf, full, data); err != nil {
		return "", err
	}
	return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
}

func parseKubeVersion(v string) (kubeVersion, error) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return kubeVersion{}, fmt.Errorf("kube version %q: want MAJOR.MINOR[.PATCH]", v)
	}
	full := "v" + strings.TrimPrefix(v, "v")
	return kubeVersion{Version: full, Major: parts[0], Minor: parts[1], GitVersion: full}, nil
}

// defaultAPIVersions are the built-in groups of a current cluster, as Helm
// reports them without a cluster connection.
var defaultAPIVersions = []string{
	"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
	"networking.k8s.io/v1", "scheduling.k8s.io/v1", "storage.k8s.io/v1",
	"apiextensions.k8s.io/v1", "autoscaling/v2", "coordination.k8s.io/v1",
}

func run() error {
	var valueFiles, apiVersions stringList
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "release-name", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kube := flag.String("kube-version", "1.30.0", "Kubernetes version for .Capabilities")
	notes := flag.Bool("notes", false, "render only templates/NOTES.txt")
	strict := flag.Bool("strict", false, "fail on a missing map key")
	flag.Var(&valueFiles, "f", "values file (repeatable, later ones win)")
	flag.Var(&apiVersions, "api-versions", "extra API version or group/version/Kind (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		return errors.New("-chart is required")
	}
	c, err := loadChart(*chartDir)
	if err != nil {
		return err
	}
	values := c.values
	for _, file := range valueFiles {
		over, err := readYAMLMap(file)
		if err != nil {
			return err
		}
		values = merge(values, over)
	}
	kv, err := parseKubeVersion(*kube)
	if err != nil {
		return err
	}
	r := &renderer{chart: c, strict: *strict}
	r.top = map[string]interface{}{
		"Values": values,
		"Release": release{
			Name: *name, Namespace: *namespace, Service: "Helm", Revision: 1, IsInstall: true,
		},
		"Chart": c.meta,
		"Capabilities": capabilities{
			KubeVersion: kv,
			APIVersions: append(versionSet(defaultAPIVersions), apiVersions...),
			HelmVersion: map[string]string{"version": "v3.16.0"},
		},
		"Files": c.files,
	}
	if err := r.parse(); err != nil {
		return err
	}
	names := make([]string, 0, len(c.templates))
	for name := range c.templates {
		names = append(names, name)
	}
	sort.Strings(names)
	if *notes {
		text, err := r.render("templates/NOTES.txt")
		if err != nil {
			return err
		}
		_, err = os.Stdout.WriteString(text)
		return err
	}
	var out bytes.Buffer
	for _, name := range names {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		text, err := r.render(name)
		if err != nil {
			return err
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s/%s\n%s\n", c.meta.Name, name, strings.Trim(text, "\n"))
	}
	_, err = os.Stdout.Write(out.Bytes())
	return err
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "helmrender:", err)
		os.Exit(1)
	}
}
