import EventSourceClient
import IKEventSource  // the IKEventSource-shaped callbacks (onMessage, addEventListener); its EventSource is spelled IKEventSource.EventSource here
import Foundation
#if canImport(Glibc)
import Glibc  // dlsym, for IDLE_TRIM
#endif
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import RealtimeCore
import RealtimeTesting
import SignalRHub
import SocketIOEngine
import SpreadbotClient

// The data path end to end, one workload per invocation, so `perf stat` measures one client process
// against a server in another process (the issue's figures: context switches and task-clock per
// message, RSS growth per idle connection). Build it once per tree and run both binaries side by
// side (Benchmarks/Scripts/engine_compare.sh does).
//
//   EngineCompare serve socketio|signalr|spreadbot      our test server; prints "PORT <n>", serves until stdin closes
//   EngineCompare serve socketio-echo                   a Socket.IO server on bare NIO that answers `echo` emits
//                                                    with one flush per read (SocketIOEchoServer.swift)
//   EngineCompare sse URL [count]                        `for try await event in source.events` until `done` or count
//   EngineCompare sse-idle URL N                         N EventSource streams (sse_hold.py), RSS growth / N,
//                                                    time to open, idle CPU, a broadcast to all (sse_hold.py's /broadcast)
//   EngineCompare socketio-idle|signalr-idle|spreadbot-idle URL N   N idle WebSocket clients: RSS growth / N,
//                                                    time to open, idle CPU, a broadcast to all
//   (idle CPU is measured over $IDLE_SECONDS, 10 by default; with $BURST_KIB=n every connection first
//   receives four n-KiB messages, so the figure is what a connection keeps once a burst is over;
//   connections open $IDLE_BATCH at a time, 64 by default (IDLE_BATCH=N: all at once); with
//   $IDLE_CONSUMER=1 the SSE and Socket.IO clients are read the way a user writes a reader, a task per
//   connection in `for await` over `source.events` or `socket.events(named:)`, not a callback; with
//   $IDLE_CONSUMER=task that task also opens the connection, and no other task waits for it)
//   EngineCompare signalr-stream URL N                   a server-to-client stream of N items (countTo)
//   EngineCompare signalr-stream-direct URL N            the same stream, iterating the HubStream itself
//   EngineCompare signalr-on URL N                       N server invocations to an `on` handler (pushMany) that does not await
//   EngineCompare signalr-on-async URL N                 the same, the handler an `async` closure
//   EngineCompare socketio-on URL N                      N server events to an `on` handler (count)
//   EngineCompare socketio-events URL N                  the same events, `for await` over `socket.events(named:)`
//   EngineCompare sse-addlistener URL [count]            the SSE events to an IKEventSource-style `addEventListener`
//   EngineCompare socketio-emit URL N [inflight]         N emitWithAck, `inflight` at a time
//   EngineCompare signalr-invoke URL N [inflight]        N invoke("echo"), `inflight` at a time
//   EngineCompare socketio-emit-loop URL N [inflight]   the same with the connection and the emitting
//                                                    tasks on one event loop (EventLoopTaskExecutor)
//   EngineCompare hop-floor N [inflight]                 the same task group with no network: each task
//                                                    waits for a continuation that an event loop resumes,
//                                                    the waiting ones in one batch per wake-up (what a
//                                                    round trip costs in tasks and thread hops alone)
//
//   EngineCompare floor socketio|signalr|signalr-on|sse URL N   the floor: a bare NIO channel reading the same
//                                                    stream and counting frames, no protocol work (FloorClient.swift);
//                                                    a fifth argument (or $FLOOR_HANDOFF) task|loop hands each read's
//                                                    count to a waiting task (default executor, or the channel's loop)
//
// $EXECUTOR says where the consuming loops run: `default` (a detached task), `loop` (that task prefers
// the client's event loop, `client.taskExecutor`), `nio` (NIO's event loops installed as Swift
// Concurrency's global executor at start), `main` (the main actor). With `default`, the workload awaits
// the consuming task's value, so that task runs at the waiting task's priority (the main task's,
// user-initiated), as a consumer a user starts from the main actor and awaits does; $NO_ESCALATION=1
// (a diagnosis) hands the result back through a continuation instead, so it runs at the default one.
// $THREADS=1 (a diagnosis) prints each thread's voluntary and involuntary context switches.
//
// Every workload prints one line: "<what>: N messages, S s, R messages/s" (idle: "KiB per connection"),
// and for the data workloads "; window: W switches, C ms CPU, R reads": what the process spent from
// the request for the messages to the last one (getrusage; `/proc/self/io` read calls), its start and
// connect left out.

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

let arguments = Array(CommandLine.arguments.dropFirst())
func argument(_ index: Int) -> String? { arguments.count > index ? arguments[index] : nil }
func number(_ index: Int, _ fallback: Int) -> Int { argument(index).flatMap(Int.init) ?? fallback }

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data((text + "\n").utf8))
    exit(2)
}

/// Resident memory of this process in KiB (/proc/self/statm).
func residentKiB() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024
}

/// What the measured window costs the whole process: context switches and CPU time (getrusage, every
/// thread's), and read system calls (`/proc/self/io`'s `syscr`: the socket's reads and the event
/// loops' wake-up reads). The window runs from ``markWindow()`` (after the connection is up) to
/// ``report(_:_:_:)``, so the process's start and connect are not in it.
struct Counters {
    var switches = 0
    var cpuSeconds = 0.0
    var reads = 0

    static func now() -> Counters {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        var reads = 0
        if let io = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8),
            let line = io.split(separator: "\n").first(where: { $0.hasPrefix("syscr:") }) {
            reads = Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
        }
        return Counters(switches: usage.ru_nvcsw + usage.ru_nivcsw, cpuSeconds: cpu, reads: reads)
    }
}
nonisolated(unsafe) var windowStart: Counters?

/// Starts the measured window (see ``Counters``): the instant and the process's counters.
func markWindow() -> ContinuousClock.Instant {
    windowStart = Counters.now()
    return ContinuousClock.now
}

func report(_ what: String, _ count: Int, _ elapsed: Duration) {
    let seconds = elapsed.seconds
    var line = "\(what): \(count) messages, \(String(format: "%.3f", seconds)) s, \(Int(Double(count) / seconds)) messages/s"
    if let start = windowStart {
        let end = Counters.now()
        line += String(
            format: "; window: %d switches, %.1f ms CPU, %d reads", end.switches - start.switches,
            (end.cpuSeconds - start.cpuSeconds) * 1000, end.reads - start.reads)
    }
    if executorChoice != .default { line += "; executor \(executorChoice.rawValue)" }
    print(line)
    // $THREADS=1 (a diagnosis): each thread's name and voluntary/involuntary context switches so far.
    if ProcessInfo.processInfo.environment["THREADS"] == "1", let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") {
        for task in tasks.sorted() {
            guard let status = try? String(contentsOfFile: "/proc/self/task/\(task)/status", encoding: .utf8) else { continue }
            let fields = status.split(separator: "\n").filter { $0.hasPrefix("Name:") || $0.hasSuffix("ctxt_switches:") == false && $0.contains("ctxt_switches") }
            print("  thread \(task): " + fields.map { $0.replacingOccurrences(of: "\t", with: " ") }.joined(separator: ", "))
        }
    }
}

/// Runs a workload's consuming loop where $EXECUTOR says: `body` gets the actor it runs on (the main
/// actor with `main`, none otherwise); `executor` is the client's task executor (for `loop`).
func consume<T: Sendable>(
    executor: EventLoopTaskExecutor, _ body: @escaping @Sendable (isolated (any Actor)?) async throws -> T
) async throws -> T {
    switch executorChoice {
    case .main: return try await body(MainActor.shared)
    case .loop: return try await Task.detached(executorPreference: executor) { try await body(nil) }.value
    case .default, .nio:
        if ProcessInfo.processInfo.environment["NO_ESCALATION"] == "1" {
            // A diagnosis: the result comes through a continuation, so the waiting task's priority
            // does not escalate the consuming task's.
            return try await withCheckedThrowingContinuation { continuation in
                Task.detached {
                    do { continuation.resume(returning: try await body(nil)) } catch { continuation.resume(throwing: error) }
                }
            }
        }
        return try await Task.detached { try await body(nil) }.value
    }
}

/// Where the workloads' consuming code runs ($EXECUTOR):
/// - `default`: a detached task on Swift Concurrency's default executor;
/// - `loop`: that task prefers the connection's event loop (`withTaskExecutorPreference(client.taskExecutor)`);
/// - `nio`: NIO's event loops are installed as Swift Concurrency's global executor, at start;
/// - `main`: the consuming loop runs on the main actor (top-level code).
enum ExecutorChoice: String { case `default`, loop, nio, main }
let executorChoice = ExecutorChoice(rawValue: ProcessInfo.processInfo.environment["EXECUTOR"] ?? "default") ?? .default

/// CPU time of this process so far (user + system), from /proc/self/stat.
func cpuSeconds() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Counts deliveries of a broadcast across every connection.
let broadcastsReceived = NIOLockedValueBox(0)
/// The client in what an idle workload's `open` returned (the client itself, or it and its reader).
func unwrap<T>(_ value: any Sendable, as type: T.Type) -> T {
    if let value = value as? T { return value }
    if let values = value as? [any Sendable], let found = values.lazy.compactMap({ $0 as? T }).first { return found }
    fail("no \(T.self) in \(value)")
}

/// $IDLE_CONSUMER=1: a reading task per idle connection (a `for await` loop), as a user writes one.
/// $IDLE_CONSUMER=task: that task also opens its connection (`Task { connect; for await ... }`), so
/// no task exists only to open a connection.
let idleConsumerTasks = ["1", "task"].contains(ProcessInfo.processInfo.environment["IDLE_CONSUMER"])
let idleConsumerOpens = ProcessInfo.processInfo.environment["IDLE_CONSUMER"] == "task"
/// $IDLE_GATE=n (a diagnosis): at most n SignalR starts run at once; the others wait before
/// start() is called, in a shallow frame, as a set-up bound at the top of start() would make them.
final class IdleGate: Sendable {
    private let state: NIOLockedValueBox<(free: Int, waiting: [CheckedContinuation<Void, Never>])>
    init(_ slots: Int) { state = NIOLockedValueBox((slots, [])) }
    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLockedValue { state -> Bool in
                if state.free > 0 { state.free -= 1; return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
    func release() {
        state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            if state.waiting.isEmpty { state.free += 1; return nil }
            return state.waiting.removeFirst()
        }?.resume()
    }
}
let idleGate = ProcessInfo.processInfo.environment["IDLE_GATE"].flatMap(Int.init).map(IdleGate.init)

/// Connections whose reading task opened them ($IDLE_CONSUMER=task).
let idleOpened = NIOLockedValueBox(0)
/// The queue of the IKEventSource-shaped sources' callbacks (the main queue is not run here).
let ikCallbackQueue = DispatchQueue(label: "engine-compare.ik-callbacks")

/// Opens `count` connections with `open` (64 at a time), then reports RSS growth per connection
/// once every one is open and the process has settled, how long opening took, the CPU the process
/// spends over `$IDLE_SECONDS` (10 by default) while every connection is idle, and, with
/// `broadcast`, how long one message sent to every connection (and the warm-up one) takes to reach
/// them all.
func idle(_ what: String, count: Int, broadcast: (@Sendable (any Sendable) async throws -> Void)? = nil,
          burst: (@Sendable (any Sendable, Int) async throws -> Void)? = nil,
          _ open: @escaping @Sendable (Int) async throws -> any Sendable) async throws {
    // Warm up the runtime (HTTP client, event loops, first connection) so the baseline includes it.
    let warm = try await open(-1)
    try await Task.sleep(for: .milliseconds(500))
    let before = residentKiB()
    var held: [any Sendable] = [warm]
    var next = 0
    let opening = ContinuousClock.now
    while next < count {
        let batch = min(ProcessInfo.processInfo.environment["IDLE_BATCH"].flatMap(Int.init) ?? 64, count - next)
        let opened = try await withThrowingTaskGroup(of: (any Sendable).self) { group in
            for index in next..<(next + batch) { group.addTask { try await open(index) } }
            var opened: [any Sendable] = []
            for try await item in group { opened.append(item) }
            return opened
        }
        held += opened
        next += batch
    }
    if idleConsumerOpens {
        // The reading tasks open their connections: wait until every one (and the warm-up one) is open.
        let deadline = ContinuousClock.now + .seconds(240)
        while idleOpened.withLockedValue({ $0 }) < count + 1, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let opened = idleOpened.withLockedValue { $0 }
        if opened < count + 1 { fail("only \(opened) of \(count + 1) connections opened") }
    }
    let openSeconds = (ContinuousClock.now - opening).seconds
    // IDLE_TRIM=1 (a diagnosis): glibc gives the free pages inside its heaps back before measuring,
    // so the figure shows what the connections hold, not what opening them left free.
    #if canImport(Glibc)
    if ProcessInfo.processInfo.environment["IDLE_TRIM"] == "1", let trim = dlsym(nil, "malloc_trim") {
        // malloc.h is not in Glibc's module map.
        _ = unsafeBitCast(trim, to: (@convention(c) (Int) -> Int32).self)(0)
    }
    #endif
    // IDLE_MALLOC_STATS=1 (a diagnosis): glibc prints each arena's size and use to stderr.
    #if canImport(Glibc)
    if ProcessInfo.processInfo.environment["IDLE_MALLOC_STATS"] == "1", let stats = dlsym(nil, "malloc_stats") {
        unsafeBitCast(stats, to: (@convention(c) () -> Void).self)()
    }
    #endif
    var burstNote = ""
    if let burst, let kib = ProcessInfo.processInfo.environment["BURST_KIB"].flatMap(Int.init) {
        for _ in 0..<4 {
            let expected = broadcastsReceived.withLockedValue { $0 } + count + 1
            try await burst(warm, kib)
            let deadline = ContinuousClock.now + .seconds(120)
            while broadcastsReceived.withLockedValue({ $0 }) < expected, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
        broadcastsReceived.withLockedValue { $0 = 0 }
        burstNote = " after four \(kib) KiB messages to each"
    }
    try await Task.sleep(for: .seconds(2))
    let after = residentKiB()
    let idleSeconds = ProcessInfo.processInfo.environment["IDLE_SECONDS"].flatMap(Int.init) ?? 10
    let cpuBefore = cpuSeconds()
    // For Scripts/idle_heap.sh, which stops the process here to see what an idle connection holds.
    FileHandle.standardError.write(Data("IDLE \(count) connections open\n".utf8))
    try await Task.sleep(for: .seconds(idleSeconds))
    let idleCPU = (cpuSeconds() - cpuBefore) / Double(idleSeconds) * 100
    var line = "\(what): \(count) idle connections\(burstNote), RSS \(before) -> \(after) KiB, \(String(format: "%.1f", Double(after - before) / Double(count))) KiB per connection"
    line += String(format: ", opened in %.1f s, idle CPU %.2f %% of a core over %d s", openSeconds, idleCPU, idleSeconds)
    if let broadcast {
        let sent = ContinuousClock.now
        try await broadcast(warm)
        let deadline = sent + .seconds(60)
        while broadcastsReceived.withLockedValue({ $0 }) < count + 1, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let got = broadcastsReceived.withLockedValue { $0 }
        line += String(format: ", broadcast delivered to %d of %d in %.2f s", got, count + 1, (ContinuousClock.now - sent).seconds)
    }
    print(line)
    withExtendedLifetime(held) {}
}

let clock = ContinuousClock()

/// The async `start()`, named by its type: in main.swift the older client's synchronous `start()`
/// is picked even inside an async function (it returns before the connection is up).
func startHub(_ connection: HubConnection) async throws {
    let start: () async throws -> Void = connection.start
    try await start()
}


/// The workload named on the command line, run on the main actor (the two executables differ only in
/// how their main thread runs it).
@MainActor public func runWorkload() async throws {
    // Before any other task: NIO's event loops as the global executor, when asked for.
    if executorChoice == .nio, !NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() {
        fail("EXECUTOR=nio: the global executor could not be installed")
    }
    switch argument(0) {
    case "serve":
        let port: Int
        var stoppers: [@Sendable () async -> Void] = []
        switch argument(1) {
        case "socketio":
            let server = try await SocketIOTestServer.start()
            port = server.port
            stoppers.append { await server.stop() }
        case "socketio-echo":
            let channel = try await SocketIOEchoServer.start()
            port = channel.localAddress?.port ?? 0
            stoppers.append { try? await channel.close() }
        case "signalr":
            let server = try await SignalRTestServer.start()
            // Sends `news` to every connection (the load run's broadcast).
            server.method("broadcast", concurrent: true) { [weak server] call in
                guard let server else { return nil }
                let ids = server.connectionIds
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for id in ids { group.addTask { try await server.invokeClientSend(id, "news", call.arguments) } }
                    try await group.waitForAll()
                }
                return .number(Double(ids.count))
            }
            server.method("pushMany", concurrent: true) { [weak server] call in
                guard let server else { return nil }
                let count = call.arguments.first?.intValue ?? 0
                for index in 0..<count { try await server.invokeClientSend(call.connectionId, "tick", [.number(Double(index))]) }
                return .number(Double(count))
            }
            port = server.port
            stoppers.append { await server.stop() }
        case "spreadbot":
            let server = try await SpreadbotTestServer.start()
            port = server.port
            // A client's send on /idle asks for a broadcast: every subscriber of /idle gets `news`, or
            // for "burst:n" n KiB of text (the test server has no broadcast request of its own; this
            // loop stands in for one).
            let watcher = Task {
                var asked = 0
                while !Task.isCancelled {
                    let received = server.received(on: "idle")
                    for request in received.dropFirst(asked) {
                        if case .text(let text) = request, text.hasPrefix("burst:"), let kib = Int(text.dropFirst(6)) {
                            _ = server.publish(String(repeating: "b", count: kib * 1024), to: "idle")
                        } else {
                            _ = server.publish("news", to: "idle")
                        }
                    }
                    asked = received.count
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            stoppers.append {
                watcher.cancel()
                await server.stop()
            }
        default:
            fail("serve socketio|socketio-echo|signalr|spreadbot")
        }
        FileHandle.standardOutput.write(Data("PORT \(port)\n".utf8))
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                _ = FileHandle.standardInput.readDataToEndOfFile()
                done.resume()
            }
        }
        for stop in stoppers { await stop() }
        exit(0)

    case "sse":
        // `for try await` over `source.events`, in a detached task by default ($EXECUTOR: elsewhere).
        guard let url = argument(1).flatMap(URL.init(string:)) else { fail("sse URL [count]") }
        let limit = number(2, .max)
        let source = EventSourceClient.EventSource(url: url, configuration: EventSourceConfiguration(maxReconnectAttempts: 0, reachability: AlwaysReachable()))
        let start = markWindow()
        let count = try await consume(executor: source.taskExecutor) { actor in
            var count = 0
            for try await event in source.events {
                if event.type == "done" { break }
                count += 1
                if count >= limit { break }
            }
            return count
        }
        report("sse", count, clock.now - start)
        source.close()

    case "sse-idle":
        guard let url = argument(1).flatMap(URL.init(string:)) else { fail("sse-idle URL N") }
        try await idle("sse", count: number(2, 2000), broadcast: { _ in
            // sse_hold.py writes `news` to every stream it holds.
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: url.absoluteString + "broadcast"))
        }, burst: { _, kib in
            _ = try await HTTPTransport.execute(HTTPRequestSpec(url: url.absoluteString + "burst?kib=\(kib)"))
        }) { _ in
            if !idleConsumerOpens && !idleConsumerTasks {
                // The callbacks shape: IKEventSource's source, counting the broadcast in onMessage
                // (on one serial queue for every stream), with no task per stream.
                let source = IKEventSource.EventSource(url: url, callbackQueue: ikCallbackQueue)
                let opened = AsyncStream.makeStream(of: Void.self)
                source.onOpen { opened.continuation.finish() }
                source.onMessage { _, _, data in
                    if data == "news" || data?.hasPrefix("bbbb") == true { broadcastsReceived.withLockedValue { $0 += 1 } }
                }
                source.connect()
                for await _ in opened.stream {}
                return source
            }
            let source = EventSourceClient.EventSource(url: url, configuration: EventSourceConfiguration(reachability: AlwaysReachable()))
            if idleConsumerOpens {
                // The stream opens when the task starts reading it; its first event says it is open.
                let reader = Task {
                    var opened = false
                    for try await event in source.events {
                        if !opened { opened = true; idleOpened.withLockedValue { $0 += 1 } }
                        if event.data == "news" || event.data.hasPrefix("bbbb") { broadcastsReceived.withLockedValue { $0 += 1 } }
                    }
                }
                return [source, reader] as [any Sendable]
            }
            if idleConsumerTasks {
                // The stream's first event says it is open; the task then reads it for its whole life.
                let first = AsyncStream.makeStream(of: Void.self)
                let reader = Task {
                    var opened = false
                    for try await event in source.events {
                        if !opened { opened = true; first.continuation.finish() }
                        if event.data == "news" || event.data.hasPrefix("bbbb") { broadcastsReceived.withLockedValue { $0 += 1 } }
                    }
                }
                for await _ in first.stream {}
                return [source, reader] as [any Sendable]
            }
            return source
        }

    case "stream-idle":
        // RealtimeCore's EventStream alone (no EventSource): what the HTTP connection costs.
        guard let url = argument(1) else { fail("stream-idle URL N") }
        try await idle("stream", count: number(2, 2000)) { _ in
            let first = AsyncStream.makeStream(of: Void.self)
            let stream = try EventStream.open(HTTPRequestSpec(url: url), onHead: { _ in .accept }, onOutputs: { _ in
                first.continuation.finish()
                return true
            })
            for await _ in first.stream {}
            return stream
        }

    case "stream-task-idle":
        // EventStream plus one task per stream awaiting its end (what a task per connection costs).
        guard let url = argument(1) else { fail("stream-task-idle URL N") }
        try await idle("stream+task", count: number(2, 2000)) { _ in
            let first = AsyncStream.makeStream(of: Void.self)
            let stream = try EventStream.open(HTTPRequestSpec(url: url), onHead: { _ in .accept }, onOutputs: { _ in
                first.continuation.finish()
                return true
            })
            for await _ in first.stream {}
            let task = Task { _ = try? await stream.finished() }
            return [stream, task] as [any Sendable]
        }

    case "socketio-idle":
        guard let url = argument(1) else { fail("socketio-idle URL N") }
        try await idle("socketio", count: number(2, 2000), broadcast: { warm in
            // The server's `broadcast` event sends `news` to every socket of the namespace.
            _ = try await unwrap(warm, as: SocketManager.self).defaultSocket.emitWithAck("broadcast", arguments: ["x"], timeout: .seconds(60))
        }, burst: { warm, kib in
            _ = try await unwrap(warm, as: SocketManager.self).defaultSocket.emitWithAck(
                "broadcast", arguments: [.string(String(repeating: "b", count: kib * 1024))], timeout: .seconds(60))
        }) { _ in
            var configuration = SocketIOConfiguration()
            configuration.engine.transports = [.websocket]
            configuration.reachability = AlwaysReachable()
            let manager = SocketManager(url: url, configuration: configuration)
            if idleConsumerOpens {
                let socket = manager.defaultSocket
                let reader = Task {
                    let news = socket.events(named: "news")
                    try await socket.connect(timeout: .seconds(60))
                    idleOpened.withLockedValue { $0 += 1 }
                    for await _ in news { broadcastsReceived.withLockedValue { $0 += 1 } }
                }
                return [manager, reader] as [any Sendable]
            }
            if idleConsumerTasks {
                let news = manager.defaultSocket.events(named: "news")
                let reader = Task {
                    for await _ in news { broadcastsReceived.withLockedValue { $0 += 1 } }
                }
                try await manager.defaultSocket.connect(timeout: .seconds(60))
                return [manager, reader] as [any Sendable]
            }
            manager.defaultSocket.on("news") { _ in broadcastsReceived.withLockedValue { $0 += 1 } }
            try await manager.defaultSocket.connect(timeout: .seconds(60))
            return manager
        }

    case "signalr-idle":
        guard let url = argument(1) else { fail("signalr-idle URL N") }
        try await idle("signalr", count: number(2, 2000), broadcast: { warm in
            // `serve signalr`'s `broadcast` method sends `news` to every connection.
            try await (warm as! HubConnection).invoke(method: "broadcast", arguments: "x")
        }, burst: { warm, kib in
            try await (warm as! HubConnection).invoke(method: "broadcast", arguments: String(repeating: "b", count: kib * 1024))
        }) { _ in
            let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).build()
            connection.on("news") { (_: String) in broadcastsReceived.withLockedValue { $0 += 1 } }
            if let idleGate { await idleGate.acquire() }
            defer { idleGate?.release() }
            try await startHub(connection)
            // No reading-task shape here (a hub is read by its `on` handlers): opened by the opener.
            if idleConsumerOpens { idleOpened.withLockedValue { $0 += 1 } }
            return connection
        }

    case "spreadbot-idle":
        guard let url = argument(1) else { fail("spreadbot-idle URL N") }
        try await idle("spreadbot", count: number(2, 2000), broadcast: { warm in
            // `serve spreadbot` publishes `news` to /idle when a client sends there.
            try await (warm as! Spreadbot).send("broadcast")
        }, burst: { warm, kib in
            try await (warm as! Spreadbot).send("burst:\(kib)")
        }) { _ in
            var configuration = SpreadbotConfiguration(baseURL: url, accessToken: "access-0")
            configuration.reachability = AlwaysReachable()
            configuration.transports = [.webSocket]
            let client = Spreadbot(configuration: configuration)
            client.onMessage { _, _, data in
                if data.string == "news" || data.string?.hasPrefix("bbbb") == true { broadcastsReceived.withLockedValue { $0 += 1 } }
            }
            client.establishConnection(path: "idle")
            for await state in client.stateUpdates() where state == .connected { break }
            // No reading-task shape here (its messages go to `onMessage`): opened by the opener.
            if idleConsumerOpens { idleOpened.withLockedValue { $0 += 1 } }
            return client
        }

    case "signalr-stream", "signalr-stream-direct":
        // `signalr-stream` reads `StreamResult.stream` (the official client's shape, what a migrating
        // user writes); `signalr-stream-direct` iterates the HubStream itself.
        guard let what = argument(0), let url = argument(1) else { fail("signalr-stream|signalr-stream-direct URL N") }
        let total = number(2, 100_000)
        let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).build()
        try await startHub(connection)
        let start = markWindow()
        // In a detached task (a server's task) by default; $EXECUTOR picks another place.
        let count = try await consume(executor: connection.taskExecutor) { actor in
            var count = 0
            let stream: HubStream<Int> = try await connection.stream(method: "countTo", arguments: total)
            if what == "signalr-stream" {
                for try await _ in (stream as any StreamResult<Int>).stream { count += 1 }
            } else {
                for try await _ in stream { count += 1 }
            }
            return count
        }
        report(what, count, clock.now - start)
        await connection.stop()

    case "signalr-on", "signalr-on-async":
        guard let what = argument(0), let url = argument(1) else { fail("signalr-on|signalr-on-async URL N") }
        let total = number(2, 100_000)
        let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).build()
        let received = NIOLockedValueBox(0)
        let done = AsyncStream.makeStream(of: Void.self)
        if what == "signalr-on" {
            // A handler that does not await.
            connection.on("tick") { (_: Int) in
                if received.withLockedValue({ $0 += 1; return $0 }) == total { done.continuation.finish() }
            }
        } else {
            // The same handler as an async closure.
            connection.on("tick") { (_: Int) async in
                if received.withLockedValue({ $0 += 1; return $0 }) == total { done.continuation.finish() }
            }
        }
        try await startHub(connection)
        let start = markWindow()
        let _: Int = try await connection.invoke(method: "pushMany", arguments: total)
        for await _ in done.stream {}
        report(what, received.withLockedValue { $0 }, clock.now - start)
        await connection.stop()

    case "socketio-on":
        guard let url = argument(1) else { fail("socketio-on URL N") }
        let total = number(2, 200_000)
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = [.websocket]
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: url, configuration: configuration)
        let socket = manager.defaultSocket
        let received = NIOLockedValueBox(0)
        let done = AsyncStream.makeStream(of: Void.self)
        socket.on("tick") { _ in
            if received.withLockedValue({ $0 += 1; return $0 }) == total { done.continuation.finish() }
        }
        try await socket.connect(timeout: .seconds(10))
        let start = markWindow()
        try socket.emit("count", arguments: [.number(Double(total))])
        for await _ in done.stream {}
        report("socketio-on", received.withLockedValue { $0 }, clock.now - start)
        manager.disconnect()

    case "socketio-events":
        guard let url = argument(1) else { fail("socketio-events URL N") }
        let total = number(2, 200_000)
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = [.websocket]
        configuration.reachability = AlwaysReachable()
        let manager = SocketManager(url: url, configuration: configuration)
        let socket = manager.defaultSocket
        // A buffer that holds the whole burst: the figure is the sequence's cost, not its drops.
        let events = socket.events(named: "tick", bufferSize: total)
        try await socket.connect(timeout: .seconds(10))
        let start = markWindow()
        try socket.emit("count", arguments: [.number(Double(total))])
        guard let executor = socket.taskExecutor else { fail("socketio-events: the manager is gone") }
        let count = try await consume(executor: executor) { actor in
            var count = 0
            for await _ in events {
                count += 1
                if count == total { break }
            }
            return count
        }
        report("socketio-events", count, clock.now - start)
        if events.droppedCount > 0 { fail("socketio-events: \(events.droppedCount) events dropped") }
        manager.disconnect()

    case "sse-addlistener":
        guard let url = argument(1).flatMap(URL.init(string:)) else { fail("sse-addlistener URL [count]") }
        let limit = number(2, .max)
        let source = IKEventSource.EventSource(url: url, callbackQueue: ikCallbackQueue)
        let received = NIOLockedValueBox(0)
        let done = AsyncStream.makeStream(of: Void.self)
        source.addEventListener("tick") { _, _, _ in
            if received.withLockedValue({ $0 += 1; return $0 }) == limit { done.continuation.finish() }
        }
        source.addEventListener("done") { _, _, _ in done.continuation.finish() }
        let start = markWindow()
        source.connect()
        for await _ in done.stream {}
        report("sse-addlistener", received.withLockedValue { $0 }, clock.now - start)
        source.disconnect()

    case "socketio-emit", "socketio-emit-loop":
        guard let url = argument(1) else { fail("socketio-emit URL N [inflight]") }
        let total = number(2, 100_000)
        let inflight = number(3, 1000)
        var configuration = SocketIOConfiguration()
        configuration.engine.transports = [.websocket]
        configuration.reachability = AlwaysReachable()
        // socketio-emit-loop: the connection on one event loop, and the emitting tasks run there too
        // (EventLoopTaskExecutor), so an ack resumes its caller without waking a pool thread.
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let onLoop = arguments[0] == "socketio-emit-loop"
        if onLoop { configuration.runtime = RealtimeRuntime(eventLoopGroup: loop) }
        let manager = SocketManager(url: url, configuration: configuration)
        let socket = manager.defaultSocket
        try await socket.connect(timeout: .seconds(10))
        let start = markWindow()
        let emitAll = { @Sendable () async throws in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<total {
                    if index >= inflight { try await group.next() }
                    group.addTask { _ = try await socket.emitWithAck("echo", arguments: [.number(Double(index))], timeout: .seconds(60)) }
                }
                try await group.waitForAll()
            }
        }
        if onLoop {
            try await withTaskExecutorPreference(EventLoopTaskExecutor(loop)) { try await emitAll() }
        } else {
            try await emitAll()
        }
        report(arguments[0], total, clock.now - start)
        manager.disconnect()

    case "signalr-invoke":
        guard let url = argument(1) else { fail("signalr-invoke URL N [inflight]") }
        let total = number(2, 100_000)
        let inflight = number(3, 1000)
        let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).build()
        try await startHub(connection)
        let start = markWindow()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<total {
                if index >= inflight { try await group.next() }
                group.addTask { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
            }
            try await group.waitForAll()
        }
        report("signalr-invoke", total, clock.now - start)
        await connection.stop()

    case "floor":
        // A bare NIO channel reading the same stream from the same server and counting its frames (or
        // SSE events): the floor under a client's inbound cost (FloorClient.swift).
        guard let kind = argument(1).flatMap(FloorClient.Kind.init(rawValue:)), let url = argument(2) else {
            fail("floor socketio|signalr|signalr-on|sse URL N")
        }
        let total = number(3, 100_000)
        let start = markWindow()
        let handOff = FloorClient.HandOff(rawValue: argument(4) ?? ProcessInfo.processInfo.environment["FLOOR_HANDOFF"] ?? "none") ?? .none
        let (messages, reads) = try await FloorClient.run(kind, url: url, count: total, handOff: handOff)
        report("floor-\(kind.rawValue)\(handOff == .none ? "" : "-handoff-\(handOff.rawValue)") (\(reads) socket reads)", messages, clock.now - start)

    case "hop-floor":
        let total = number(1, 100_000)
        let inflight = number(2, 1000)
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        // Continuations waiting for the loop, and whether a wake-up is already on its way (one
        // `execute` per batch, as the outbox wakes its writer once per batch).
        let waiting = NIOLockedValueBox<(continuations: [CheckedContinuation<Void, Never>], woken: Bool)>(([], false))
        @Sendable func resumeAll() {
            let batch = waiting.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                state.woken = false
                defer { state.continuations = [] }
                return state.continuations
            }
            for continuation in batch { continuation.resume() }
        }
        let start = markWindow()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<total {
                if index >= inflight { await group.next() }
                group.addTask {
                    await withCheckedContinuation { continuation in
                        let wake = waiting.withLockedValue { state -> Bool in
                            state.continuations.append(continuation)
                            defer { state.woken = true }
                            return !state.woken
                        }
                        if wake { loop.execute { resumeAll() } }
                    }
                }
            }
            await group.waitForAll()
        }
        report("hop-floor", total, clock.now - start)

    default:
        fail("EngineCompare serve|sse|sse-idle|socketio-idle|signalr-idle|spreadbot-idle|signalr-stream|signalr-on|socketio-on|socketio-emit|signalr-invoke ...")
    }
}
