import ArgumentParser
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore

/// The flags every connecting subcommand takes, with the same meaning everywhere.
struct ConnectionOptions: ParsableArguments {
    @Option(name: [.customShort("H"), .long], help: "A request header 'Name: value' (repeatable).")
    var header: [String] = []
    @Flag(name: .long, help: "Skip certificate verification (dangerous).") var insecure = false
    @Option(name: .long, help: ArgumentHelp("Trust the certificates in this PEM file (a private CA) besides the system's.", valueName: "file"))
    var cacert: String?
    @Option(name: .long, help: "Seconds to wait for the connection (connect, TLS, handshake).") var timeout: Double = 10
    @Option(name: .long, help: ArgumentHelp(
        "Connect through this proxy: http://[user:password@]host[:port] or socks5://host[:port] (an empty value: no proxy). Without it, the https_proxy, http_proxy, all_proxy and no_proxy environment variables apply, as in curl.",
        valueName: "url"))
    var proxy: String?
    @Option(name: .long, help: ArgumentHelp(
        "Hosts reached without the proxy, comma-separated (a name also matches its subdomains; * matches every host), as curl's --noproxy.",
        valueName: "hosts"))
    var noproxy: String?
    @Flag(name: .long, help: "One JSON object per line.") var json = false

    func validate() throws {
        if insecure && cacert != nil { throw ValidationError("--insecure and --cacert contradict each other") }
        if timeout <= 0 { throw ValidationError("--timeout is a number of seconds above 0") }
        if let cacert, !FileManager.default.isReadableFile(atPath: cacert) { throw ValidationError("--cacert: cannot read \(cacert)") }
        _ = try headers
        do {
            _ = try proxyConfiguration
        } catch let error as RealtimeError {
            throw ValidationError("--proxy: \(error.detail)")
        }
    }

    /// The proxy: `--proxy` (or the environment), less the `--noproxy` hosts.
    var proxyConfiguration: ProxyConfiguration {
        get throws {
            var configuration = try proxy.map { try ProxyConfiguration.url($0) } ?? .environment
            if let noproxy { configuration.noProxy = NoProxyRules.entries(noproxy) }
            return configuration
        }
    }

    /// The runtime every client of the command runs on: the shared one with the proxy settings.
    var runtime: RealtimeRuntime {
        var runtime = RealtimeRuntime.shared
        if let proxy = try? proxyConfiguration { runtime.proxy = proxy }
        return runtime
    }

    /// The headers, parsed.
    var headers: HTTPHeaders {
        get throws {
            var headers = HTTPHeaders()
            for line in header {
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { throw ValidationError("headers look like 'Name: value', got '\(line)'") }
                headers.add(name: String(parts[0]).trimmingCharacters(in: .whitespaces), value: String(parts[1].drop(while: { $0 == " " })))
            }
            return headers
        }
    }

    /// The headers as a dictionary (the SignalR options' shape); a repeated name keeps its last value.
    var headerDictionary: [String: String] {
        get throws {
            var result: [String: String] = [:]
            for (name, value) in try headers { result[name] = value }
            return result
        }
    }

    var tls: TLSOptions {
        if insecure { return .dangerouslyDisableCertificateVerification() }
        if let cacert, let pem = try? String(contentsOfFile: cacert, encoding: .utf8) {
            return TLSOptions(additionalTrustRootsPEM: [pem])
        }
        return .default
    }

    var connectTimeout: Duration { .milliseconds(Int64(timeout * 1000)) }
}

/// Writes one line to standard output at once (one `write`, never held in a buffer): a pipe or a
/// file sees every line as it is printed, and nothing is lost when the command is interrupted or
/// killed. (`print` is block-buffered when standard output is not a terminal.)
func say(_ text: String) {
    StandardOutput.write(text + "\n", to: STDOUT_FILENO)
}

/// Writes to standard output and error with write(2), not `FileHandle` (whose `write` traps when
/// the reader has gone). When standard output's reader has closed it (`realtime … | head -1`), the
/// command ends at once and quietly with status 141, what a shell reports for a program ended by
/// SIGPIPE (128 + 13): the process ignores SIGPIPE, so its writes see EPIPE instead of the signal.
/// A closed standard error is ignored.
enum StandardOutput {
    static func write(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if written >= 0 {
                    offset += written
                } else if errno == EINTR {
                    continue
                } else {
                    if descriptor == STDOUT_FILENO, errno == EPIPE { exit(128 + SIGPIPE) }
                    return
                }
            }
        }
    }
}

/// Runs a command's work until it ends or SIGINT/SIGTERM arrives; on a signal the work is
/// cancelled (so it can print what it has, such as `--stats`) and the command exits with
/// 128 + the signal (130 for Ctrl-C, 143 for SIGTERM).
enum Interruption {
    private static let signalled = NSLock()
    // nonisolated(unsafe): read and written only with `signalled` held.
    nonisolated(unsafe) private static var received: Int32?

    /// The signal that ended the work, if one did.
    static var signal: Int32? {
        signalled.lock()
        defer { signalled.unlock() }
        return received
    }

    static func run(_ work: @escaping @Sendable () async throws -> Void) async throws {
        try await returning(work)
    }

    /// ``run(_:)`` for work that returns a value.
    static func returning<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async throws -> T {
        // The signal sources are in place before the work starts: a signal that came between the
        // two would be ignored (SIG_IGN) and lost.
        let running = NIOLockedValueBox<Task<T, any Error>?>(nil)
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            Foundation.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                signalled.lock()
                if received == nil { received = number }
                signalled.unlock()
                running.withLockedValue { $0 }?.cancel()
                // The work has most of a second to print what it has and close its connections;
                // then the command ends whatever it is waiting for, so a signal always ends it
                // within 1 s.
                // A thread of its own (the Dispatch queues may be busy with the work), and _exit:
                // exit's handlers could wait on what the work holds.
                Thread.detachNewThread {
                    usleep(800_000)
                    _exit(128 + number)
                }
            }
            source.resume()
            sources.append(source)
        }
        defer { sources.forEach { $0.cancel() } }
        // A task of its own, so that a signal handler (on a Dispatch queue, outside any task) can
        // cancel the work; it is awaited right here.
        let task = Task { try await work() }
        running.withLockedValue { $0 = task }
        if signal != nil { task.cancel() }
        let result = await task.result
        if let signal { throw ExitCode(128 + signal) }
        return try result.get()
    }
}

/// A first connection that fails ends a command, as curl does, unless retries were asked for: the
/// client's reconnects before the first connection are cut short. Also keeps the last error the
/// client reported.
final class FirstConnectionWatch: Sendable {
    enum Outcome: Sendable { case connected, gaveUp, ended }

    private let box = NIOLockedValueBox<(gaveUp: Bool, lastError: String?)>((false, nil))
    func record(_ error: String?) { box.withLockedValue { $0.lastError = error ?? $0.lastError } }
    var value: Bool { box.withLockedValue { $0.gaveUp } }
    var lastError: String? { box.withLockedValue { $0.lastError } }

    /// Follows a client's connection state from before its first connect until it connects, ends,
    /// or fails more than `retries` attempts (then it gave up; the caller stops the client).
    func watch(_ states: AsyncStream<ConnectionState>, retries: Int) async -> Outcome {
        // The client is disconnected until it starts connecting.
        var started = false
        for await state in states {
            switch state {
            case .connecting: started = true
            case .connected: return .connected
            case .reconnecting(let attempt) where attempt > retries:
                box.withLockedValue { $0.gaveUp = true }
                return .gaveUp
            case .reconnecting: started = true
            case .disconnected: if started { return .ended }
            }
        }
        return .ended
    }

    /// How the error names the retries.
    static func retries(_ count: Int) -> String { count == 0 ? "no --retry given" : "after \(count) retries" }
}
