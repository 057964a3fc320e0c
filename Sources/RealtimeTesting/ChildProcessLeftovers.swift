import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The child processes (proxies, Python peers, relays) still running when the test process exits.
///
/// A test that stops its child from an unstructured task (`defer { Task { await peer.stop() } }`)
/// may end the process before that task runs; a peer that shuts down gracefully when its standard
/// input closes can outlive it by its server's shutdown grace (aiohttp waits up to 60 s for a held
/// poll), and dante's daemon forks children that outlive their parent. At exit every registered
/// child is killed with SIGKILL, with every process it forked, and its folder (if any) removed.
enum ChildProcessLeftovers {
    private static let running = NIOLockedValueBox<[Int32: String?]>([:])
    private static let registered: Void = { atexit { ChildProcessLeftovers.endAll() } }()

    /// Records a child that has been started; `directory` is removed with it at exit.
    static func started(pid: Int32, directory: String? = nil) {
        _ = registered
        running.withLockedValue { $0[pid] = directory }
    }

    /// The child has been stopped (and its folder removed) by its owner.
    static func ended(pid: Int32) {
        _ = running.withLockedValue { $0.removeValue(forKey: pid) }
    }

    private static func endAll() {
        let all = running.withLockedValue { running in
            defer { running = [:] }
            return running
        }
        for (pid, directory) in all {
            for member in [pid] + descendants(of: pid) { kill(member, SIGKILL) }
            if let directory { try? FileManager.default.removeItem(atPath: directory) }
        }
    }

    /// The processes below `pid`, from /proc (Linux; none elsewhere).
    static func descendants(of pid: Int32) -> [Int32] {
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
}
