/* cli.h -- what the commands of the keel tool share: exit statuses, the
** option parser, number parsing, messages, formatting, opening an index and
** the progress bar.
**
** The tool uses only the public API (keel.h) and the vector file reader
** (vecfile.h), so it drives the library exactly as any other program would.
** The shared code lives in keel.c; each cmd_*.c holds one or a few commands.
*/
#ifndef KEEL_CLI_H
#define KEEL_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "keel.h"

/* Exit statuses: 0, 1 and 2 are fixed by the product contract; 3..5 tell
** a script why an index could not be used (doc/keel.1, keel help). */
#define CLI_OK      0 /* success */
#define CLI_FAIL    1 /* keel (or a file) refused: message and help line */
#define CLI_USAGE   2 /* the command line was wrong */
#define CLI_MISSING 3 /* no index at INDEX (nothing there) */
#define CLI_CORRUPT 4 /* INDEX is a damaged index (keel check says where) */
#define CLI_LOCKED  5 /* another process holds INDEX's writer */
/* cli_parse saw --help and printed the command's help: exit 0. */
#define CLI_HELP  (-1)

#if defined(__GNUC__)
#define CLI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CLI_PRINTF(f, a)
#endif

/* One option a command accepts: "--long" or "-x". cli_parse fills value with
** the option's argument ("" for a flag that was given) or leaves it NULL. */
typedef struct cli_opt {
    const char *name;
    int takes_value;
    const char *value;
} cli_opt;

/* Parses argv[0..argc) (the words after the command name). Options may come
** before or after positionals, as "--opt value", "--opt=value" or "-xVALUE";
** "--" ends the options. Positionals are moved, in order, to the front of
** argv and counted in *npos. Returns CLI_OK, CLI_USAGE (message printed) or
** CLI_HELP (help printed). */
int cli_parse(const char *cmd, int argc, char **argv, cli_opt *opts,
              size_t nopts, int *npos);

/* Checks the positional count: names[i] names positional i ("INDEX"); with
** variadic set the last name may repeat. Prints a usage error if wrong. */
int cli_want(const char *cmd, int npos, char **pos, const char *const *names,
             int nnames, int variadic);

/* Parses a decimal number in min..max with no sign, space or suffix; what
** names it in messages ("-k", "id"). Prints a usage error if wrong. */
int cli_u64(const char *cmd, const char *what, const char *s, uint64_t min,
            uint64_t max, uint64_t *out);
int cli_u32(const char *cmd, const char *what, const char *s, uint32_t min,
            uint32_t max, uint32_t *out);

/* A usage error if more than one of the n inputs given[i] (NULL: not
** given; names[i] is what the user calls it) is "-": standard input can
** feed only one of them. */
int cli_one_stdin(const char *cmd, const char *const *names,
                  const char *const *given, size_t n);

/* A usage error if an id repeats among ids[0..n) (the ID arguments of
** cmd): names it and which arguments hold it. */
int cli_repeated_id(const char *cmd, const uint64_t *ids, size_t n);

/* A usage error: "keel CMD: <what>" then "help: <help>" (a pointer to the
** command's help if help is NULL). Returns CLI_USAGE. */
int cli_usage(const char *cmd, const char *help, const char *fmt, ...)
    CLI_PRINTF(3, 4);

/* A failure with our own message (what, then help). Returns CLI_FAIL. */
int cli_fail(const char *help, const char *fmt, ...) CLI_PRINTF(2, 3);

/* Prints keel_errmsg() (or keel_strerror(rc) if keel left none) to stderr,
** in the CLI's terms (cli_speak). Returns the exit status for rc: CLI_CORRUPT,
** CLI_LOCKED or CLI_FAIL. */
int cli_keel_error(int rc);

/* Closes idx and returns rc, or a failed close's exit status when rc was
** CLI_OK (a close that fails turns a success into a failure). */
int cli_close_index(keel_index *idx, int rc);

/* cli_keel_error for a failed keel_add_batch of rows first.. of input
** (what messages call the whole input): the library's "vector N of the
** batch" becomes "vector first+N of <input>", the row in the whole input. */
int cli_keel_error_at(int rc, size_t first, const char *input);

/* The same for a failed keel_open or keel_open_reader, where
** KEEL_ENOTFOUND means no index at the path: CLI_MISSING. */
int cli_open_error(int rc);

/* Rewrites a library message into the CLI's terms (options and commands
** instead of C calls and fields) into out (len bytes). Returns out. */
const char *cli_speak(const char *msg, char *out, size_t len);

/* Notes whether argv (before any "--") holds --json: then every error
** below also prints {"error", "help", "exit_status"} on standard output. */
void cli_json_errors(int argc, char **argv);

/* Prints a message that is already "what\nhelp: ..." (vecfile's). */
int cli_fail_msg(const char *msg);

/* Prints the help of one command (or the overview for NULL) to f. Returns
** nonzero if there is no such command. */
int cli_help(FILE *f, const char *cmd);

/* Seconds on CLOCK_MONOTONIC. */
double cli_now(void);

/* Formatting into the caller's buffer (returned): 1234567 -> "1,234,567";
** bytes -> "221.4 MB" (powers of 1000). */
const char *cli_commas(uint64_t v, char *buf, size_t len);
const char *cli_bytes(uint64_t v, char *buf, size_t len);

/* Writes s as a JSON string, quotes included. */
void cli_json_string(FILE *f, const char *s);

const char *cli_metric_name(keel_metric m);
const char *cli_precision_name(keel_precision p);
const char *cli_codes_name(keel_codes c);

/* Opens an existing index as a reader; prints keel's message on failure. */
int cli_open_reader(const char *path, const keel_options *opt,
                    keel_index **out);

/* Which of metric, precision, M and codes the user named on the command
** line. */
#define CLI_GIVEN_METRIC    1u
#define CLI_GIVEN_PRECISION 2u
#define CLI_GIVEN_M         4u
#define CLI_GIVEN_CODES     8u

/* Opens path as its writer. If the index exists, the fields of opt the user
** did not name (given) are taken from the file: a non-NULL keel_options
** makes keel insist on its metric, precision and codes, and there is no
** "whatever the file has" value for them. With create 0 a missing index is
** an error, never a new file; with create set, dim gives a new index's
** dimensions. */
int cli_open_writer(const char *path, uint32_t dim, keel_options *opt,
                    unsigned given, int create, keel_index **out);

/* A progress bar on stderr, driven by keel_set_progress; does nothing unless
** stderr is a terminal. */
typedef struct cli_progress {
    const char *label;
    double start;
    int width; /* characters drawn on the line now */
} cli_progress;

void cli_progress_begin(cli_progress *p, keel_index *idx, const char *label);
void cli_progress_end(cli_progress *p, keel_index *idx);

/* Ctrl-C and SIGTERM while a command writes an index (interrupt.c). */
#define CLI_PHASE_OFF  0 /* the handler ends the command at once */
#define CLI_PHASE_WAIT 1 /* waiting for input: the handler ends it at once */
#define CLI_PHASE_KEEL 2 /* keel works: the handler notes the signal only */

/* Catches SIGINT and SIGTERM for the rest of the command. */
void cli_interrupt_install(void);

/* Enters phase p. The message (printf-style) is what the handler writes if
** it ends the command in this phase ("keel build: interrupted; ..."); with
** created set, it first removes path, which the command created. A NULL
** path keeps the path and created of the phase before. */
void cli_interrupt_phase(int p, const char *path, int created,
                         const char *fmt, ...) CLI_PRINTF(4, 5);

/* The signal caught (SIGINT, SIGTERM), or 0. The exit status for it is 128
** plus its number. */
int cli_interrupted(void);

/* A keel_cancel_fn: nonzero once a signal was caught. */
int cli_interrupt_cancel(void *arg);

/* The commands. Each gets the words after its name and returns an exit
** status. */
int cmd_build(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_delete(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_compact(int argc, char **argv);
int cmd_publish(int argc, char **argv);
int cmd_prune(int argc, char **argv);
int cmd_versions(int argc, char **argv);

/* The newest version published at url (keel_list_versions), 0 with the
** error when it cannot be listed. */
int cli_newest_version(const char *url, uint64_t *newest);
int cmd_ids(int argc, char **argv);
int cmd_backup(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif /* KEEL_CLI_H */
