import Foundation
public import RealtimeCore
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A real proxy server from Debian, started on 127.0.0.1 on a free port with a configuration of its
/// own in a temporary folder, for tests that must show traffic went through a proxy:
/// `tinyproxy` (HTTP `CONNECT` and absolute-form requests, optionally with Basic credentials),
/// `squid` with Debian's stock rules (absolute-form requests to any port above 1024, `CONNECT` to
/// port 443 only: a tunnel to any other port is refused with 403) or `danted` from `dante-server`
/// (SOCKS5 without authentication).
///
/// ``log`` is the proxy's own log, where each tunnel or request names its target: a test reads it
/// to assert from the proxy's side that a connection went through it. Fails with instructions when
/// the program is missing; it never skips silently.
// @unchecked Sendable: every stored property is a `let` set in init; `Process` (not Sendable in
// Foundation) is only terminated and waited on, which it allows from any thread, and the log is a
// file read anew on each call.
public final class ProxyProcess: @unchecked Sendable {
    /// Which proxy.
    public enum Kind: Sendable, Hashable, CustomStringConvertible {
        /// tinyproxy; with credentials, it requires them (`BasicAuth`).
        case tinyproxy(username: String? = nil, password: String? = nil)
        /// Debian's squid with its stock `/etc/squid/squid.conf`, changed only in its `http_port`
        /// and the files it writes (pid, logs, core dumps), which go to the proxy's folder.
        case squid
        /// dante's `danted`, SOCKS5 without authentication.
        case dante

        /// A readable summary, for test names.
        public var description: String {
            switch self {
            case .tinyproxy(let username, _): username == nil ? "tinyproxy" : "tinyproxy with Basic auth"
            case .squid: "squid (stock rules)"
            case .dante: "dante (SOCKS5)"
            }
        }
    }

    /// The program is not installed.
    public struct Missing: Error, CustomStringConvertible {
        /// What is missing and how to install it.
        public let description: String
    }

    /// Which proxy this is.
    public let kind: Kind
    /// The port it listens on (127.0.0.1).
    public let port: Int
    /// Its log file.
    public let logPath: String
    private let process: Process
    private let directory: String

    /// The configuration a client uses to go through this proxy.
    public var configuration: ProxyConfiguration {
        switch kind {
        case .tinyproxy(let username, let password): .http(host: "127.0.0.1", port: port, username: username, password: password)
        case .squid: .http(host: "127.0.0.1", port: port)
        case .dante: .socks5(host: "127.0.0.1", port: port)
        }
    }

    /// The proxy's URL as curl and the environment variables take it (credentials included).
    public var url: String {
        switch kind {
        case .tinyproxy(let username?, let password): "http://\(username):\(password ?? "")@127.0.0.1:\(port)"
        case .tinyproxy, .squid: "http://127.0.0.1:\(port)"
        case .dante: "socks5h://127.0.0.1:\(port)"
        }
    }

    private init(kind: Kind, port: Int, logPath: String, process: Process, directory: String) {
        self.kind = kind
        self.port = port
        self.logPath = logPath
        self.process = process
        self.directory = directory
    }

    deinit {
        Self.end(process)
        try? FileManager.default.removeItem(atPath: directory)
        ChildProcessLeftovers.ended(pid: process.processIdentifier)
    }

    /// Starts the proxy and returns once it accepts connections.
    ///
    /// With `port`, on that port (a proxy started again where it was, for a restart); otherwise on
    /// a free one.
    public static func start(_ kind: Kind, port: Int = 0) async throws -> ProxyProcess {
        try await BlockingWork.run { try launch(kind, port: port) }
    }

    /// The proxy's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Whether the log shows a tunnel or request to `127.0.0.1:port` or `localhost:port`: a
    /// `CONNECT 127.0.0.1:port` or an absolute-form `GET http://127.0.0.1:port/…` (tinyproxy logs a
    /// request as it starts, squid in its access log when the transaction ends, refused or not).
    public func sawTarget(port target: Int) -> Bool {
        let log = log
        return switch kind {
        case .tinyproxy, .squid:
            ["127.0.0.1", "localhost"].contains { host in
                log.contains("\(host):\(target) ") || log.contains("//\(host):\(target)/")
            }
        case .dante: log.contains("127.0.0.1.\(target) ") || log.contains("localhost.\(target) ")
        }
    }

    /// Waits until the log shows a tunnel or request to `127.0.0.1:port` (a proxy writes its log
    /// as it goes, not before it answers; dante names the target once bytes flow).
    public func waitForTarget(port target: Int, limit: Duration = .seconds(10)) async throws {
        do {
            try await waitUntil("\(kind) logging a connection to port \(target)", limit: limit) { sawTarget(port: target) }
        } catch {
            throw ConditionTimeout(description: "\(error); its log ends with:\n\(log.suffix(1500))")
        }
    }

    /// Stops the proxy (and the processes it started), waits for it to exit and removes its
    /// folder.
    public func stop() async {
        let (process, directory) = (process, directory)
        await BlockingWork.run {
            Self.end(process)
            try? FileManager.default.removeItem(atPath: directory)
            ChildProcessLeftovers.ended(pid: process.processIdentifier)
        }
    }

    /// Ends `process` and its descendants (dante forks children that outlive a terminated parent):
    /// SIGTERM, then SIGKILL after a second. Polls instead of `waitUntilExit`, which spins a CPU on
    /// a thread without a run loop.
    private static func end(_ process: Process) {
        guard process.isRunning else { return }
        let pid = process.processIdentifier
        let family = [pid] + ChildProcessLeftovers.descendants(of: pid)
        for member in family { kill(member, SIGTERM) }
        let deadline = Date().addingTimeInterval(1)
        while process.isRunning, Date() < deadline { usleep(5_000) }
        for member in family { kill(member, SIGKILL) }
        let last = Date().addingTimeInterval(5)
        while process.isRunning, Date() < last { usleep(5_000) }
    }

    private static func launch(_ kind: Kind, port fixedPort: Int) throws -> ProxyProcess {
        let (program, package) = switch kind {
        case .tinyproxy: ("/usr/bin/tinyproxy", "tinyproxy-bin")
        case .squid: ("/usr/sbin/squid", "squid")
        case .dante: ("/usr/sbin/danted", "dante-server")
        }
        guard FileManager.default.isExecutableFile(atPath: program) else {
            throw Missing(description: "\(program) is missing: run Scripts/test.sh, which installs the Debian package \(package) (or apt-get install \(package))")
        }
        var lastFailure = ""
        // A free port is found by binding port 0 and letting it go; another process may take it in
        // between, so a start that does not listen is tried again on another port.
        for _ in 0..<5 {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("realtime-proxy-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            // The proxies drop privileges to `nobody` for some work: the folder must be theirs to write.
            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory)
            let port = fixedPort == 0 ? try freePort() : fixedPort
            let logPath = directory + "/proxy.log"
            let configPath = directory + "/proxy.conf"
            try configuration(kind, port: port, logPath: logPath, directory: directory).write(toFile: configPath, atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = switch kind {
            case .tinyproxy: ["-d", "-c", configPath]
            // -N: in the foreground, no daemon, so that ending the process ends the proxy.
            case .squid: ["-N", "-f", configPath]
            case .dante: ["-f", configPath, "-N", "1"]
            }
            // Its own output goes to a file: a pipe nobody reads would stall it once full.
            let outputPath = directory + "/output.txt"
            _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
            let output = FileHandle(forWritingAtPath: outputPath)
            process.standardOutput = output
            process.standardError = output
            process.standardInput = Pipe()
            try process.run()
            let proxy = ProxyProcess(kind: kind, port: port, logPath: logPath, process: process, directory: directory)
            ChildProcessLeftovers.started(pid: process.processIdentifier, directory: directory)
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline, process.isRunning {
                if canConnect(port: port) { return proxy }
                usleep(10_000)
            }
            end(process)
            lastFailure = ((try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "") + proxy.log
        }
        throw Missing(description: "\(program) did not start listening: \(lastFailure.suffix(2000))")
    }

    /// Debian's stock squid configuration.
    static let stockSquidConfiguration = "/etc/squid/squid.conf"

    private static func configuration(_ kind: Kind, port: Int, logPath: String, directory: String) throws -> String {
        switch kind {
        case .squid:
            // Stock rules unchanged (among them `http_access deny CONNECT !SSL_ports`): only the
            // port, and the files squid writes (it drops to the user `proxy`; the folder is 0777).
            let stock = try String(contentsOfFile: stockSquidConfiguration, encoding: .utf8)
            var lines = stock.components(separatedBy: "\n").map { line in
                line.hasPrefix("http_port ") ? "http_port 127.0.0.1:\(port)" : line
            }
            lines += [
                "pid_filename \(directory)/squid.pid", "access_log stdio:\(logPath)", "cache_log stdio:\(directory)/cache.log",
                "coredump_dir \(directory)", "pinger_enable off", "shutdown_lifetime 0 seconds",
            ]
            return lines.joined(separator: "\n") + "\n"
        case .tinyproxy(let username, let password):
            var lines = [
                "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "LogFile \"\(logPath)\"", "LogLevel Info", "MaxClients 200",
                "Allow 127.0.0.1", "DisableViaHeader Yes",
            ]
            if let username { lines.append("BasicAuth \(username) \(password ?? "")") }
            return lines.joined(separator: "\n") + "\n"
        case .dante:
            return """
                logoutput: \(logPath)
                internal: 127.0.0.1 port = \(port)
                external: 127.0.0.1
                socksmethod: none
                clientmethod: none
                user.privileged: root
                user.unprivileged: nobody
                client pass {
                  from: 127.0.0.0/8 to: 0.0.0.0/0
                  log: connect disconnect error
                }
                socks pass {
                  from: 127.0.0.0/8 to: 0.0.0.0/0
                  command: connect
                  log: connect disconnect error iooperation
                }

                """
        }
    }

    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Missing(description: "no socket for a port probe") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw Missing(description: "could not bind a port probe") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
