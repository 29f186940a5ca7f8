// compose-check loads Compose files with compose-go, the library behind
// `docker compose config`, so they can be checked where no Docker is installed: the
// Compose Specification's JSON schema, interpolation (a `${VAR:?message}` that is unset
// fails), references between services, networks and volumes, depends_on cycles. It
// then checks what compose-go leaves to the engine: that every bind-mounted file or
// folder exists, and that a service waited for as healthy has a healthcheck.
//
//	go run . [-print | -json | -services] [-no-dotenv] FILE...
//
// -json prints each file's resolved model as JSON (for checks that read it); -no-dotenv
// ignores a .env beside the file (so that a check can tell that a variable is required).
//
// Exits 1 on the first file that fails, with compose-go's message.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func main() {
	print := flag.Bool("print", false, "print each file's resolved model (as `docker compose config` would)")
	asJSON := flag.Bool("json", false, "print each file's resolved model as JSON")
	services := flag.Bool("services", false, "print each file's service names, one a line, instead of a summary")
	noDotEnv := flag.Bool("no-dotenv", false, "ignore a .env file beside the compose file")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: compose-check [-print | -json | -services] [-no-dotenv] FILE...")
		os.Exit(2)
	}
	for _, file := range flag.Args() {
		if err := check(file, *print, *asJSON, *services, !*noDotEnv); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
			os.Exit(1)
		}
	}
}

func check(file string, print, asJSON, services, dotEnv bool) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	options := []cli.ProjectOptionsFn{
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
	}
	if dotEnv {
		options = append(options, cli.WithDotEnv)
	}
	options = append(options, cli.WithConsistency(true), cli.WithResolvedPaths(true))
	opts, err := cli.NewProjectOptions([]string{abs}, options...)
	if err != nil {
		return err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return err
	}
	var problems []string
	for _, name := range project.ServiceNames() {
		svc := project.Services[name]
		for _, v := range svc.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				problems = append(problems, fmt.Sprintf("service %s: bind mount source %s: %v", name, v.Source, err))
			}
		}
		for dep, d := range svc.DependsOn {
			if d.Condition == types.ServiceConditionHealthy {
				if target, ok := project.Services[dep]; ok && (target.HealthCheck == nil || target.HealthCheck.Disable) {
					problems = append(problems, fmt.Sprintf("service %s: waits for %s to be healthy, which has no healthcheck", name, dep))
				}
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, p)
		}
		return fmt.Errorf("%d problem(s)", len(problems))
	}
	if print {
		out, err := project.MarshalYAML()
		if err != nil {
			return err
		}
		os.Stdout.Write(out)
	}
	if asJSON {
		out, err := project.MarshalJSON()
		if err != nil {
			return err
		}
		os.Stdout.Write(append(out, '\n'))
		return nil
	}
	if services {
		for _, name := range project.ServiceNames() {
			fmt.Println(name)
		}
		return nil
	}
	fmt.Printf("%s: valid (project %s, %d services, %d volumes)\n", file, project.Name, len(project.Services), len(project.Volumes))
	return nil
}
