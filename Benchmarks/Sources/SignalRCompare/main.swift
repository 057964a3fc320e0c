import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub

// Side by side in one run: our HubConnection, pysignalr 1.3.3 and signalrcore 1.0.2 invoke `echo`
// over WebSockets, sequentially and with N in flight, with JSON and MessagePack, against two servers:
// aiosignalr 0.1.1 (its own process) and our SignalRTestServer (in this process).
//
// Run: cd Benchmarks && REALTIME_PYTHON=../.venv/bin/python swift run -c release SignalRCompare [sequential] [inflight] [rounds]

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
func argument(_ index: Int, _ fallback: Int) -> Int { arguments.count > index ? arguments[index] : fallback }
let sequential = argument(0, 3000)
let inflight = argument(1, 1000)
let rounds = argument(2, 5)

let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
func peer(_ name: String) -> String { root.appendingPathComponent("Tests/SignalRHubTests/Peers/\(name)").path }

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

struct Rates {
    var sequential: Double
    var inflight: Double
}

func ours(url: String, kind: HubProtocolKind) async throws -> Rates {
    let connection = HubConnectionBuilder().withUrl(url: url, transport: .webSockets).withHubProtocol(kind).build()
    try await connection.start()
    for index in 0..<200 { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
    let clock = ContinuousClock()
    var start = clock.now
    for index in 0..<sequential { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
    let sequentialRate = Double(sequential) / (clock.now - start).seconds
    start = clock.now
    for _ in 0..<rounds {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<inflight {
                group.addTask { let _: Int = try await connection.invoke(method: "echo", arguments: index) }
            }
            try await group.waitForAll()
        }
    }
    let inflightRate = Double(inflight * rounds) / (clock.now - start).seconds
    await connection.stop()
    return Rates(sequential: sequentialRate, inflight: inflightRate)
}

func python(_ script: String, url: String, kind: HubProtocolKind, count: Int) async throws -> Rates? {
    let client = try PythonPeer(scriptPath: peer(script), arguments: [url, kind.rawValue, "bench", String(count)], waitForPort: false)
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
    for kind in HubProtocolKind.allCases {
        let swift = try await ours(url: url, kind: kind)
        // The Python clients run the in-flight workload once with `inflight` calls.
        let pysignalr = try await python("pysignalr_client.py", url: url, kind: kind, count: min(sequential, inflight))
        let signalrcore = try await python("signalrcore_client.py", url: url, kind: kind, count: min(sequential, inflight))
        let fastestSequential = max(pysignalr?.sequential ?? 0, signalrcore?.sequential ?? 0)
        let fastestInflight = max(pysignalr?.inflight ?? 0, signalrcore?.inflight ?? 0)
        print("\(name), \(kind.rawValue) (invocations per second)")
        print("                    sequential   \(inflight) in flight")
        print("   swift-realtime    \(format(swift.sequential))   \(format(swift.inflight))")
        if let pysignalr { print("   pysignalr         \(format(pysignalr.sequential))   \(format(pysignalr.inflight))") }
        if let signalrcore { print("   signalrcore       \(format(signalrcore.sequential))   \(format(signalrcore.inflight))") }
        if fastestSequential > 0 {
            print(String(format: "   ratio to the faster Python client: sequential %.1fx, in flight %.1fx",
                swift.sequential / fastestSequential, swift.inflight / max(fastestInflight, 1)))
        }
    }
}

let aio = try PythonPeer(scriptPath: peer("aiosignalr_server.py"))
try await compare(server: "aiosignalr 0.1.1", url: "http://127.0.0.1:\(aio.port)/hub")
aio.stop()
let server = try await SignalRTestServer.start()
try await compare(server: "SignalRTestServer", url: server.url)
await server.stop()
