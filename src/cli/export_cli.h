/* atoll export (src/cli/export_cli.c). */
#ifndef ATOLL_EXPORT_CLI_H
#define ATOLL_EXPORT_CLI_H

/* argv after "export"; returns the exit status. */
int atoll_export_main(int argc, char **argv);

#endif
