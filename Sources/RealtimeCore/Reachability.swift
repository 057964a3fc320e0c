import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Something that can tell whether the network is usable, and wait until it is.
///
/// The reconnect driver asks it before every attempt, so a client does not burn its attempts while
/// the machine is offline.
public protocol Reachability: Sendable {
    /// Whether the network looks usable right now.
    func isReachable() async -> Bool
    /// Returns once ``isReachable()`` is true; throws `CancellationError` when cancelled.
    func waitUntilReachable() async throws
}

/// Polls the operating system every `interval` until an up, non-loopback interface has an address,
/// and, if a probe target is set, a TCP connection to it succeeds.
public struct PollingReachability: Reachability {
    /// How often the interfaces (and the probe) are checked.
    public var interval: Duration
    /// A host and port to open (and close) a TCP connection to, as a stronger check than interfaces.
    public var probe: (host: String, port: Int)?
    /// Accept loopback interfaces as a usable network (for machines and tests with nothing else).
    public var acceptLoopback: Bool
    /// How long a probe connection may take before it counts as unreachable.
    public var probeTimeout: Duration
    let runtime: RealtimeRuntime

    /// Makes a polling check; every parameter is the property of the same name.
    public init(
        interval: Duration = .seconds(2),
        probe: (host: String, port: Int)? = nil,
        acceptLoopback: Bool = false,
        probeTimeout: Duration = .seconds(3),
        runtime: RealtimeRuntime = .shared
    ) {
        self.interval = interval
        self.probe = probe
        self.acceptLoopback = acceptLoopback
        self.probeTimeout = probeTimeout
        self.runtime = runtime
    }

    /// Whether an interface is up with an address (and the probe connects, if set).
    public func isReachable() async -> Bool {
        guard Self.hasUsableInterface(acceptLoopback: acceptLoopback || Self.isLoopbackHost(probe?.host)) else {
            return false
        }
        guard let probe else { return true }
        return await tcpProbe(host: probe.host, port: probe.port)
    }

    /// Checks every ``interval`` until ``isReachable()`` is true; throws `CancellationError` when cancelled.
    public func waitUntilReachable() async throws {
        while true {
            try Task.checkCancellation()
            if await isReachable() { return }
            runtime.logger.debug("network unreachable, polling again", metadata: ["realtime.interval": "\(interval)"])
            try await runtime.sleep(for: interval)
        }
    }

    package static func isLoopbackHost(_ host: String?) -> Bool {
        guard let host else { return false }
        return host == "localhost" || host.hasPrefix("127.") || host == "::1" || host == "[::1]"
    }

    private func tcpProbe(host: String, port: Int) async -> Bool {
        let bootstrap = ClientBootstrap(group: runtime.eventLoopGroup)
            .connectTimeout(.nanoseconds(Int64(probeTimeout.seconds * 1e9)))
        do {
            let channel = try await SocketConnection.connect(bootstrap, host: host, port: port).get()
            try? await channel.close()
            return true
        } catch {
            return false
        }
    }

    /// Whether the OS lists an interface that is up (and not loopback, unless accepted) with an IP address.
    package static func hasUsableInterface(acceptLoopback: Bool) -> Bool {
        #if canImport(Glibc) || canImport(Musl) || canImport(Darwin)
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return true }  // cannot tell: do not block
        defer { freeifaddrs(list) }
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            let flags = Int32(entry.pointee.ifa_flags)
            guard flags & Int32(IFF_UP) != 0, let address = entry.pointee.ifa_addr else { continue }
            if flags & Int32(IFF_LOOPBACK) != 0 && !acceptLoopback { continue }
            // Read from the bytes, not through `sockaddr`'s member: in a whole-module build that
            // member may belong to NIO's C shim instead of the C library (see SocketConnection.swift).
            #if canImport(Darwin)
            let family = Int32(UnsafeRawPointer(address).load(fromByteOffset: 1, as: UInt8.self))  // after sa_len
            #else
            let family = Int32(UnsafeRawPointer(address).load(as: UInt16.self))
            #endif
            if family == AF_INET || family == AF_INET6 { return true }
        }
        return false
        #else
        return true
        #endif
    }
}

/// A reachability you switch by hand: for tests, and for apps that learn about the network elsewhere.
public final class ManualReachability: Reachability {
    private struct State {
        var reachable: Bool
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var cancelled: Set<Int> = []
        var nextWaiter = 0
        var checks = 0
    }
    private let state: NIOLockedValueBox<State>

    /// Makes a reachability that answers `reachable` until ``set(reachable:)`` changes it.
    public init(reachable: Bool = true) {
        state = NIOLockedValueBox(State(reachable: reachable))
    }

    /// How many times a reconnect loop has asked.
    public var checkCount: Int { state.withLockedValue { $0.checks } }

    /// Switches the answer; waiters resume when it becomes reachable.
    public func set(reachable: Bool) {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.reachable = reachable
            guard reachable else { return [] }
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The last value given to ``set(reachable:)``.
    public func isReachable() async -> Bool {
        state.withLockedValue {
            $0.checks += 1
            return $0.reachable
        }
    }

    /// Returns once ``set(reachable:)`` made it reachable; throws `CancellationError` when cancelled.
    public func waitUntilReachable() async throws {
        let isReachable = state.withLockedValue {
            $0.checks += 1
            return $0.reachable
        }
        if isReachable { return }
        let id = state.withLockedValue { state -> Int in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLockedValue { state -> Bool in
                    if state.reachable || state.cancelled.remove(id) != nil { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state in
                let waiter = state.waiters.removeValue(forKey: id)
                if waiter == nil { state.cancelled.insert(id) }
                return waiter
            }
            waiter?.resume()
        }
        try Task.checkCancellation()
    }
}

/// Always reachable: for loopback-only use.
public struct AlwaysReachable: Reachability {
    /// Makes a value with every default.
    public init() {}
    /// Always true.
    public func isReachable() async -> Bool { true }
    /// Returns at once.
    public func waitUntilReachable() async throws {}
}
