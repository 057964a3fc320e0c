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
/// `tinyproxy` (HTTP `CONNECT` and absolute-form requests, optionally with Basic credentials) or
/// `danted` from `dante-server` (SOCKS5 without authentication).
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
        /// dante's `danted`, SOCKS5 without authentication.
        case dante

        /// A readable summary, for test names.
        public var description: String {
            switch self {
            case .tinyproxy(let username, _): username == nil ? "tinyproxy" : "tinyproxy with Basic auth"
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
        case .dante: .socks5(host: "127.0.0.1", port: port)
        }
    }

    /// The proxy's URL as curl and the environment variables take it (credentials included).
    public var url: String {
        switch kind {
        case .tinyproxy(let username?, let password): "http://\(username):\(password ?? "")@127.0.0.1:\(port)"
        case .tinyproxy: "http://127.0.0.1:\(port)"
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
        Leftovers.ended(pid: process.processIdentifier)
    }

    /// Starts the proxy and returns once it accepts connections.
    public static func start(_ kind: Kind) async throws -> ProxyProcess {
        try await BlockingWork.run { try launch(kind) }
    }

    /// The proxy's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Whether the log shows a tunnel or request to `127.0.0.1:port` or `localhost:port`.
    public func sawTarget(port target: Int) -> Bool {
        let log = log
        return switch kind {
        case .tinyproxy: log.contains("127.0.0.1:\(target) ") || log.contains("localhost:\(target) ")
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
            Leftovers.ended(pid: process.processIdentifier)
        }
    }

    /// The proxies still running when the test process exits: a test that stops its proxy from an
    /// unstructured task (`defer { Task { await proxy.stop() } }`) may end the process before that
    /// task runs, and dante's daemon would outlive it. At exit they are killed, with every process
    /// they forked, and their folders removed.
    private enum Leftovers {
        private static let running = NIOLockedValueBox<[Int32: String]>([:])
        private static let registered: Void = { atexit { Leftovers.endAll() } }()

        static func started(pid: Int32, directory: String) {
            _ = registered
            running.withLockedValue { $0[pid] = directory }
        }

        static func ended(pid: Int32) {
            _ = running.withLockedValue { $0.removeValue(forKey: pid) }
        }

        private static func endAll() {
            let all = running.withLockedValue { running in
                defer { running = [:] }
                return running
            }
            for (pid, directory) in all {
                for member in [pid] + ProxyProcess.descendants(of: pid) { kill(member, SIGKILL) }
                try? FileManager.default.removeItem(atPath: directory)
            }
        }
    }

    /// Ends `process` and its descendants (dante forks children that outlive a terminated parent):
    /// SIGTERM, then SIGKILL after a second. Polls instead of `waitUntilExit`, which spins a CPU on
    /// a thread without a run loop.
    private static func end(_ process: Process) {
        guard process.isRunning else { return }
        let pid = process.processIdentifier
        let family = [pid] + descendants(of: pid)
        for member in family { kill(member, SIGTERM) }
        let deadline = Date().addingTimeInterval(1)
        while process.isRunning, Date() < deadline { usleep(5_000) }
        for member in family { kill(member, SIGKILL) }
        let last = Date().addingTimeInterval(5)
        while process.isRunning, Date() < last { usleep(5_000) }
    }

    /// The processes below `pid`, from /proc (Linux; none elsewhere).
    fileprivate static func descendants(of pid: Int32) -> [Int32] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        var children: [Int32: [Int32]] = [:]
        for entry in entries {
            guard let child = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let parent = Int32(fields[1]) { children[parent, default: []].append(child) }
        }
        var result: [Int32] = []
        var queue = [pid]
        while let next = queue.popLast() {
            for child in children[next] ?? [] {
                result.append(child)
                queue.append(child)
            }
        }
        return result
    }

    private static func launch(_ kind: Kind) throws -> ProxyProcess {
        let (program, package) = switch kind {
        case .tinyproxy: ("/usr/bin/tinyproxy", "tinyproxy-bin")
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
            let port = try freePort()
            let logPath = directory + "/proxy.log"
            let configPath = directory + "/proxy.conf"
            try configuration(kind, port: port, logPath: logPath).write(toFile: configPath, atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = switch kind {
            case .tinyproxy: ["-d", "-c", configPath]
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
            Leftovers.started(pid: process.processIdentifier, directory: directory)
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

    private static func configuration(_ kind: Kind, port: Int, logPath: String) -> String {
        switch kind {
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
