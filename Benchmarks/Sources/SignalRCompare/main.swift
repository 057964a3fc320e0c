import Foundation
import NIOCore
import NIOPosix
import RealtimeCore
import RealtimeTesting
import SignalRHub

// Side by side in one run: our HubConnection, pysignalr 1.3.3 and signalrcore 1.0.2 invoke `echo`
// over WebSockets, sequentially and with N in flight, with JSON and MessagePack, against two servers:
// aiosignalr 0.1.1 (its own process) and our SignalRTestServer (in this process). It also prints the
// CPU time per invocation of this process and of the aiosignalr process (from /proc), which bounds
// what any client can reach against that server.
//
// Run: cd Benchmarks && REALTIME_PYTHON=../.venv/bin/python swift run -c release SignalRCompare [sequential] [inflight] [rounds]
// Environment: SIGNALR_COMPARE_SERVER=aiosignalr|ours|ours-process (one server only: ours is
// SignalRTestServer in this process, ours-process the same server in a child process), SIGNALR_COMPARE_OURS_ONLY=1
// (no Python clients), SIGNALR_COMPARE_PINNED=1 (see `pinned`).

/// `SIGNALR_COMPARE_PINNED=1`: our client runs on one event loop and its calls are made from that
/// loop (`EventLoopTaskExecutor`), so a sequential call wakes no pool thread. Against the in-process
/// server, client and server then usually share that one thread.
let pinned = ProcessInfo.processInfo.environment["SIGNALR_COMPARE_PINNED"] == "1"

/// `SignalRCompare serve`: runs SignalRTestServer in this process, prints "PORT <n>" and serves until
/// standard input closes (the parent's "SignalRTestServer, own process" runs against it, so every
/// client, ours included, talks to that server across processes as the Python clients do).
if CommandLine.arguments.dropFirst().first == "serve" {
    let server = try await SignalRTestServer.start()
    FileHandle.standardOutput.write(Data("PORT \(server.port)\n".utf8))
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        Thread.detachNewThread {
            _ = FileHandle.standardInput.readDataToEndOfFile()
            done.resume()
        }
    }
    await server.stop()
    exit(0)
}

/// Starts `SignalRCompare serve` and returns the process and the server's port.
func startServerProcess() throws -> (Process, Pipe, Int) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = ["serve"]
    let output = Pipe()
    let input = Pipe()
    process.standardOutput = output
    process.standardInput = input
    try process.run()
    var line = [UInt8]()
    while true {
        let byte = output.fileHandleForReading.readData(ofLength: 1)
        guard let first = byte.first else { break }
        if first == UInt8(ascii: "\n") { break }
        line.append(first)
    }
    let text = String(decoding: line, as: UTF8.self)
    guard text.hasPrefix("PORT "), let port = Int(text.dropFirst(5)) else {
        process.terminate()
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "the server process did not start: \(text)"])
    }
    return (process, input, port)
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
func argument(_ index: Int, _ fallback: Int) -> Int { arguments.count > index ? arguments[index] : fallback }
let sequential = argument(0, 3000)
let inflight = argument(1, 1000)
/// Rounds of `inflight` calls, for every client alike (5 rounds, 45 ms of our client, gave rates
/// 88,000-160,000/s from run to run on this 2-core machine; 20 are steadier).
let rounds = argument(2, 20)

let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
func peer(_ name: String) -> String { root.appendingPathComponent("Tests/SignalRHubTests/Peers/\(name)").path }

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

struct Rates {
    var sequential: Double
    var inflight: Double
    /// CPU time per invocation (µs) of this process and of the server process (nil when the server
    /// runs in this process), for the sequential and the in-flight phase.
    var cpu: (client: Double, server: Double?, clientInflight: Double, serverInflight: Double?) = (0, nil, 0, nil)
}

/// CPU seconds (user + system) of this process.
func ownCPU() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU seconds (user + system) of another process, from /proc/<pid>/stat (fields 14 and 15, in clock ticks).
func processCPU(_ pid: Int32?) -> Double? {
    guard let pid, let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return nil }
    let fields = text[text.index(after: close)...].split(separator: " ")
    // After the ")" come field 3 (state) onwards: utime is field 14, stime field 15.
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Server process id for CPU accounting (nil: the server runs in this process).
nonisolated(unsafe) var serverProcess: Int32?

func ours(url: String, kind: HubProtocolType) async throws -> Rates {
    let loop = MultiThreadedEventLoopGroup.singleton.next()
    let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).withHubProtocol(hubProtocol: kind)
        .withOptions { if pinned { $0.runtime = RealtimeRuntime(eventLoopGroup: loop) } }.build()
    try await connection.start()
    if pinned {
        return try await withTaskExecutorPreference(EventLoopTaskExecutor(loop)) { try await measure(connection) }
    }
    return try await measure(connection)
}

func measure(_ connection: HubConnection) async throws -> Rates {
    for index in 0..<200 { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
    let clock = ContinuousClock()
    var start = clock.now
    var cpuStart = (ownCPU(), processCPU(serverProcess))
    for index in 0..<sequential { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
    let sequentialRate = Double(sequential) / (clock.now - start).seconds
    var cpuEnd = (ownCPU(), processCPU(serverProcess))
    let sequentialCPU = ((cpuEnd.0 - cpuStart.0) / Double(sequential) * 1e6,
                         cpuEnd.1.flatMap { end in cpuStart.1.map { (end - $0) / Double(sequential) * 1e6 } })
    start = clock.now
    cpuStart = cpuEnd
    for _ in 0..<rounds {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<inflight {
                group.addTask { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
            }
            try await group.waitForAll()
        }
    }
    let inflightRate = Double(inflight * rounds) / (clock.now - start).seconds
    cpuEnd = (ownCPU(), processCPU(serverProcess))
    let calls = Double(inflight * rounds)
    await connection.stop()
    return Rates(sequential: sequentialRate, inflight: inflightRate,
                 cpu: (sequentialCPU.0, sequentialCPU.1, (cpuEnd.0 - cpuStart.0) / calls * 1e6,
                       cpuEnd.1.flatMap { end in cpuStart.1.map { (end - $0) / calls * 1e6 } }))
}

/// `SIGNALR_COMPARE_OURS_ONLY=1` measures only our client (for profiling runs).
let oursOnly = ProcessInfo.processInfo.environment["SIGNALR_COMPARE_OURS_ONLY"] != nil

func python(_ script: String, url: String, kind: HubProtocolType, count: Int) async throws -> Rates? {
    if oursOnly { return nil }
    let client = try await PythonPeer.start(scriptPath: peer(script), arguments: [url, kind.rawValue, "bench", String(count), String(rounds)], waitForPort: false)
    let (output, status) = await client.waitForExit(limit: .seconds(600))
    var rates = Rates(sequential: 0, inflight: 0)
    for line in output.split(separator: "\n") {
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[0] == "BENCH", let value = Double(parts[2]) else { continue }
        if parts[1] == "sequential" { rates.sequential = value } else { rates.inflight = value }
    }
    guard status == 0, rates.sequential > 0, rates.inflight > 0 else {
        print("   \(script) \(kind.rawValue) against \(url) failed: \(output.prefix(400))")
        return nil
    }
    return rates
}

func format(_ value: Double) -> String { String(format: "%8.0f", value) }

func compare(server name: String, url: String) async throws {
    for kind in HubProtocolType.allCases {
        let swift = try await ours(url: url, kind: kind)
        // The Python clients run the same in-flight workload: `rounds` rounds of `inflight` calls.
        let pysignalr = try await python("pysignalr_client.py", url: url, kind: kind, count: min(sequential, inflight))
        let signalrcore = try await python("signalrcore_client.py", url: url, kind: kind, count: min(sequential, inflight))
        let fastestSequential = max(pysignalr?.sequential ?? 0, signalrcore?.sequential ?? 0)
        let fastestInflight = max(pysignalr?.inflight ?? 0, signalrcore?.inflight ?? 0)
        print("\(name), \(kind.rawValue) (invocations per second)")
        print("                    sequential   \(inflight) in flight")
        print("   swift-realtime    \(format(swift.sequential))   \(format(swift.inflight))")
        if let pysignalr { print("   pysignalr         \(format(pysignalr.sequential))   \(format(pysignalr.inflight))") }
        if let signalrcore { print("   signalrcore       \(format(signalrcore.sequential))   \(format(signalrcore.inflight))") }
        func micros(_ value: Double?) -> String { value.map { String(format: "%.0f", $0) } ?? "-" }
        print("   swift-realtime CPU per invocation (µs), this process / server process: sequential \(micros(swift.cpu.client)) / \(micros(swift.cpu.server)), in flight \(micros(swift.cpu.clientInflight)) / \(micros(swift.cpu.serverInflight))")
        if fastestSequential > 0 {
            print(String(format: "   ratio to the faster Python client: sequential %.1fx, in flight %.1fx",
                swift.sequential / fastestSequential, swift.inflight / max(fastestInflight, 1)))
        }
    }
}

/// `SIGNALR_COMPARE_SERVER=aiosignalr` or `=ours` runs against one server only.
let onlyServer = ProcessInfo.processInfo.environment["SIGNALR_COMPARE_SERVER"]
if onlyServer == nil || onlyServer == "aiosignalr" {
    let aio = try await PythonPeer.start(scriptPath: peer("aiosignalr_server.py"))
    serverProcess = aio.processIdentifier
    try await compare(server: "aiosignalr 0.1.1", url: "http://127.0.0.1:\(aio.port)/hub")
    await aio.stop()
    serverProcess = nil
}
if onlyServer == nil || onlyServer == "ours" {
    let server = try await SignalRTestServer.start()
    try await compare(server: "SignalRTestServer (in this process)", url: server.url)
    await server.stop()
}
if onlyServer == nil || onlyServer == "ours-process" {
    let (process, input, port) = try startServerProcess()
    serverProcess = process.processIdentifier
    try await compare(server: "SignalRTestServer (own process)", url: "http://127.0.0.1:\(port)/hub")
    try input.fileHandleForWriting.close()
    process.waitUntilExit()
    serverProcess = nil
}
