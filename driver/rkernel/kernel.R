# Notebook-style R kernel for the sandbox driver.
#
# Started by the Go driver as `Rscript --vanilla kernel.R`, speaking the same
# kernel protocol as the Python kernel (driver/pykernel/kernel.py): fd 1/2 =
# the user's raw stdout/stderr pipes, fd 3 = control in (first a hello
# {"nonce"}, then one JSON request per line: {"id", "code", "language",
# "env", "setenv"}: env is set for the request only, setenv for good before
# it, the sandbox's environment), fd 4 = control out (one JSON message per line: ready / display /
# result / error / done).  Before every message that carries "sync": N, the
# marker "\x00\x1eSBX-SYNC:<nonce>:<N>\x1e\x00" is written to fd 1 and fd 2.
#
# A cell's expressions run one by one in the global environment, like
# Rscript: a visible value is printed, except the last one, which is the
# cell's result (text/plain as print() shows it).  Errors become `error`
# messages (ename = the condition's class, e.g. "simpleError"; traceback =
# the calls, innermost first, like traceback()).  Base graphics go to a PNG
# device opened at the first plot of a cell and closed after it; each page
# is sent as an image/png display.  SIGINT interrupts a cell (R's
# "interrupt" condition); the globals are kept.  Outside cells interrupts
# are suspended, and one that arrived while idle is taken (and dropped)
# before the next cell starts.  Base R only: no packages.
local({
  ctl_in <- file("/dev/fd/3", open = "r", raw = TRUE)
  ctl_out <- file("/dev/fd/4", open = "wb", raw = TRUE)
  out1 <- file("/dev/fd/1", open = "wb", raw = TRUE)
  out2 <- file("/dev/fd/2", open = "wb", raw = TRUE)
  max_plain <- 1048576L
  st <- new.env()
  st$sync <- 0
  st$id <- NULL
  st$cell <- 0L
  st$nonce <- ""
  plot_dir <- file.path(tempdir(), "sandboxd-plots")
  dir.create(plot_dir, showWarnings = FALSE)

  ctrl_chars <- c(1:7, 11L, 14:31)
  jstr <- function(s) {
    s <- enc2utf8(as.character(s))
    s <- iconv(s, "UTF-8", "UTF-8", sub = "?")
    s[is.na(s)] <- "NA"
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    s <- gsub("\b", "\\b", s, fixed = TRUE)
    s <- gsub("\f", "\\f", s, fixed = TRUE)
    for (cp in ctrl_chars) {
      ch <- intToUtf8(cp)
      if (any(grepl(ch, s, fixed = TRUE))) s <- gsub(ch, sprintf("\\u%04x", cp), s, fixed = TRUE)
    }
    paste0("\"", s, "\"")
  }
  jarr <- function(v) paste0("[", paste(vapply(v, jstr, ""), collapse = ","), "]")
  jobj <- function(l) paste0("{", paste0(jstr(names(l)), ":", vapply(l, jstr, ""), collapse = ","), "}")
  trunc <- function(s) if (nchar(s, type = "bytes") > max_plain) paste0(substr(s, 1, max_plain), "\u2026[truncated]") else s

  write_all <- function(con, r) {
    writeBin(r, con)
    flush(con)
  }

  # send writes one sync'ed message for the running request (dropped while
  # idle); fields are JSON texts by name.
  send <- function(type, fields = list(), end = FALSE) {
    if (is.null(st$id)) return(invisible())
    try(flush(stdout()), silent = TRUE)
    try(flush(stderr()), silent = TRUE)
    st$sync <- st$sync + 1
    n <- sprintf("%.0f", st$sync)
    body <- paste0("{\"type\":", jstr(type), ",\"id\":", jstr(st$id), ",\"sync\":", n)
    if (length(fields)) body <- paste0(body, ",", paste0(jstr(names(fields)), ":", unlist(fields), collapse = ","))
    body <- paste0(body, "}\n")
    marker <- c(as.raw(c(0, 0x1e)), charToRaw(paste0("SBX-SYNC:", st$nonce, ":", n)), as.raw(c(0x1e, 0)))
    try(write_all(out1, marker), silent = TRUE)
    try(write_all(out2, marker), silent = TRUE)
    ok <- tryCatch({ write_all(ctl_out, charToRaw(enc2utf8(body))); TRUE }, error = function(e) FALSE)
    if (!ok) quit(save = "no", status = 1) # the driver is gone
    if (end) st$id <- NULL
    invisible()
  }

  b64chars <- strsplit("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "")[[1]]
  b64 <- function(r) {
    n <- length(r)
    if (n == 0) return("")
    pad <- (3 - n %% 3) %% 3
    m <- matrix(as.integer(c(r, as.raw(rep(0, pad)))), nrow = 3)
    v <- m[1, ] * 65536 + m[2, ] * 256 + m[3, ]
    ch <- b64chars[as.vector(rbind(v %/% 262144, (v %/% 4096) %% 64, (v %/% 64) %% 64, v %% 64)) + 1]
    if (pad > 0) ch[(length(ch) - pad + 1):length(ch)] <- "="
    paste(ch, collapse = "")
  }

  # Base graphics: a PNG device per cell, opened only when the cell plots.
  options(device = function(...) {
    grDevices::png(filename = file.path(plot_dir, sprintf("cell%d-%%03d.png", st$cell)),
                   width = 7, height = 5, units = "in", res = 96, type = "cairo")
  })
  flush_plots <- function() {
    while (grDevices::dev.cur() > 1) grDevices::dev.off()
    files <- sort(list.files(plot_dir, pattern = sprintf("^cell%d-.*\\.png$", st$cell), full.names = TRUE))
    for (f in files) {
      size <- file.info(f)$size
      if (!is.na(size) && size > 0) {
        png <- readBin(f, "raw", n = size)
        send("display", list(data = jobj(list("image/png" = b64(png), "text/plain" = "<R plot>"))))
      }
      unlink(f)
    }
  }

  # parse_request decodes the driver's request line (JSON from Go's
  # encoder: string values and one object of strings, "env").
  parse_request <- function(line) {
    toks <- regmatches(line, gregexpr("\"[^\"\\\\]*+(?:\\\\.[^\"\\\\]*+)*+\"|[{}:,]|[^\\s{}:,\"]+", line, perl = TRUE))[[1]]
    str <- function(t) {
      if (substr(t, 1, 1) != "\"") stop("want a string, got ", substr(t, 1, 20))
      s <- eval(parse(text = t, keep.source = FALSE)[[1]])
      Encoding(s) <- "UTF-8"
      s
    }
    i <- 1
    tok <- function() { t <- toks[i]; i <<- i + 1; if (is.na(t)) stop("truncated request"); t }
    if (tok() != "{") stop("not an object")
    req <- list(env = character(0))
    repeat {
      t <- tok()
      if (t == "}") break
      if (t == ",") next
      key <- str(t)
      if (tok() != ":") stop("missing ':'")
      v <- tok()
      if (v == "{") {
        env <- character(0)
        repeat {
          t <- tok()
          if (t == "}") break
          if (t == ",") next
          k <- str(t)
          if (tok() != ":") stop("missing ':'")
          env[[k]] <- str(tok())
        }
        req[[key]] <- env
      } else if (substr(v, 1, 1) == "\"") {
        req[[key]] <- str(v)
      } else {
        req[[key]] <- NULL
      }
    }
    if (!is.character(req$id) || !is.character(req$code)) stop("'id' and 'code' must be strings")
    req
  }

  fmt_call <- function(cl) paste(deparse(cl, width.cutoff = 200L, nlines = 3L), collapse = "\n")

  report <- function(e, calls) {
    ename <- if (inherits(e, "interrupt")) "interrupt" else class(e)[1]
    msg <- if (inherits(e, "interrupt")) "interrupted (SIGINT)" else conditionMessage(e)
    tb <- character(0)
    cl <- conditionCall(e)
    head <- if (!is.null(cl) && !inherits(e, "interrupt")) paste0("Error in ", fmt_call(cl), " : ", msg) else paste0("Error: ", msg)
    tb <- paste0(head, "\n")
    if (length(calls)) tb <- c(tb, sprintf("%d: %s\n", rev(seq_along(calls)), vapply(rev(calls), fmt_call, "")))
    send("error", list(ename = jstr(ename), evalue = jstr(trunc(msg)), traceback = jarr(vapply(tb, trunc, ""))))
  }

  # user_calls keeps the calls of the user's code from a sys.calls() taken
  # in a handler: after run_cell's eval, before the condition machinery.
  user_calls <- function(calls, base) {
    calls <- if (length(calls) > base) calls[(base + 1):length(calls)] else list()
    while (length(calls) && (identical(calls[[1]][[1]], quote(withVisible)) || identical(calls[[1]][[1]], quote(eval)))) calls <- calls[-1]
    drop <- c(".handleSimpleError", "h", "stop", "signalCondition", "doTryCatch", "tryCatchOne", "tryCatchList")
    keep <- vapply(calls, function(c) {
      f <- c[[1]]
      !(is.name(f) && as.character(f) %in% drop[1:2])
    }, TRUE)
    calls[keep]
  }

  run_cell <- function(code) {
    exprs <- parse(text = code, keep.source = FALSE, srcfile = NULL)
    st$base <- sys.nframe()
    n <- length(exprs)
    for (i in seq_len(n)) {
      r <- withVisible(eval(exprs[[i]], envir = globalenv()))
      if (r$visible) {
        if (i == n) {
          txt <- paste(utils::capture.output(print(r$value)), collapse = "\n")
          send("result", list(data = jobj(list("text/plain" = trunc(txt)))))
        } else {
          print(r$value)
        }
      }
    }
  }

  run <- function(req) {
    st$id <- req$id
    st$cell <- st$cell + 1L
    # setenv for good (never restored), then the request's own env.
    if (length(req$setenv)) do.call(Sys.setenv, as.list(req$setenv))
    env <- req$env
    saved <- if (length(env)) Sys.getenv(names(env), unset = NA, names = TRUE) else character(0)
    if (length(env)) do.call(Sys.setenv, as.list(env))
    status <- "ok"
    calls <- NULL
    # An interrupt that arrived while idle (a timeout racing the previous
    # command's end) is pending: taken here, it cannot hit this cell.
    tryCatch(allowInterrupts({ for (i in 1:2000) NULL; NULL }), interrupt = function(e) NULL)
    res <- tryCatch(
      withCallingHandlers(
        allowInterrupts({ run_cell(req$code); NULL }),
        error = function(e) calls <<- user_calls(sys.calls(), st$base),
        warning = function(w) {
          cl <- conditionCall(w)
          where <- if (is.null(cl)) "" else paste0("In ", fmt_call(cl), " : ")
          cat("Warning message:\n", where, conditionMessage(w), "\n", sep = "", file = stderr())
          invokeRestart("muffleWarning")
        }),
      error = function(e) e,
      interrupt = function(e) e)
    if (!is.null(res)) {
      status <- "error"
      try(report(res, if (inherits(res, "interrupt")) NULL else calls), silent = TRUE)
    }
    tryCatch(flush_plots(), error = function(e) NULL, interrupt = function(e) NULL)
    for (k in names(saved)) {
      if (is.na(saved[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, structure(list(saved[[k]]), names = k))
    }
    # Like Jupyter's execution_count: cells run by this kernel, this one
    # included.
    send("done", list(status = jstr(status), execution_count = sprintf("%d", st$cell)), end = TRUE)
  }

  # read_line returns the next line from fd 3; it quits when the driver
  # closed it. Interrupts are suspended outside cells (see below), so a
  # SIGINT while idle only stays pending.
  read_line <- function() {
    x <- tryCatch(readLines(ctl_in, n = 1L, warn = FALSE, encoding = "UTF-8"),
                  error = function(e) character(0))
    if (length(x) != 1L) quit(save = "no", status = 0)
    x
  }

  # Interrupts are allowed only while a cell runs (allowInterrupts in run):
  # elsewhere a SIGINT could cut a control message or a request in half.
  suspendInterrupts({
  hello <- read_line()
  m <- regmatches(hello, regexec("\"nonce\"\\s*:\\s*\"([0-9a-f]{16,})\"", hello))[[1]]
  if (length(m) != 2) quit(save = "no", status = 2) # not started by the driver
  st$nonce <- m[2]
  write_all(ctl_out, charToRaw(sprintf("{\"type\":\"ready\",\"pid\":%d}\n", Sys.getpid())))
  repeat {
    line <- read_line()
    if (!nzchar(trimws(line))) next
    req <- tryCatch(parse_request(line), error = function(e) e)
    if (inherits(req, "error")) {
      id <- regmatches(line, regexec("\"id\"\\s*:\\s*\"([A-Za-z0-9._-]*)\"", line))[[1]]
      st$id <- if (length(id) == 2) id[2] else ""
      send("error", list(ename = jstr("ProtocolError"), evalue = jstr(paste("bad request:", conditionMessage(req))), traceback = "[]"))
      send("done", list(status = jstr("error")), end = TRUE)
      next
    }
    tryCatch(run(req), interrupt = function(e) NULL)
  }
  })
})
