package client

// Languages a Command may use. Python and bash are in every sandbox image;
// the others only in images that have their interpreter (sandboxd answers
// a command in a language the sandbox's image lacks with a
// FAILED_PRECONDITION error naming it). JavaScript and TypeScript commands
// share one Node.js interpreter and its globals; R commands share one R
// session; Java commands one JShell (variables, methods, classes and
// imports); each bash command is a fresh shell.
const (
	LanguagePython     = "python"
	LanguageBash       = "bash"
	LanguageJavaScript = "javascript"
	LanguageTypeScript = "typescript"
	LanguageR          = "r"
	LanguageJava       = "java"
)
